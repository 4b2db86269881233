MODEL=Qwen/Qwen2.5-3B-Instruct
DATA=zouxuhong/Countdown-Tasks-3to4#50000
OUTPUT_DIR=work_dirs/countdown-tasks

    CUDA_VISIBLE_DEVICES=0,1,2,3,4,5 \
    WANDB_API_KEY=xx \
    NPROC_PER_NODE=6 \
    swift rlhf \
        --rlhf_type grpo \
        --model $MODEL \
        --external_plugins plugin.py \
        --reward_funcs external_countdown format \
        --use_vllm true \
        --vllm_mode server \
        --vllm_server_base_url http://0.0.0.0:8000 \
        --train_type full \
        --torch_dtype bfloat16 \
        --dataset $DATA \
        --split_dataset_ratio 0 \
        --max_length 2048 \
        --max_completion_length 2048 \
        --output_dir $OUTPUT_DIR \
        --num_train_epochs 3 \
        --per_device_train_batch_size 2 \
        --gradient_accumulation_steps 8 \
        --save_total_limit 20 \
        --logging_steps 1 \
        --warmup_ratio 0.05 \
        --dataloader_num_workers 4 \
        --dataset_num_proc 4 \
        --num_generations 4 \
        --temperature 1.0 \
        --deepspeed zero3 \
        --log_completions true
