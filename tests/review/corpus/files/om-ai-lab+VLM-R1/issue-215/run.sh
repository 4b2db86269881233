cd src/open-r1-multimodal

export DEBUG_MODE="true"

RUN_NAME="Qwen2.5-VL-7B-GRPO-GUI_multi-image"
export LOG_PATH="./debug_log_$RUN_NAME.txt"

torchrun --nproc_per_node=5 \
    --nnodes=1 \
    --node_rank=${RANK} \
    --master_addr=${MASTER_ADDR} \
    --master_port=${MASTER_PORT} \
    src/open_r1/grpo_jsonl.py \
    --deepspeed local_scripts/zero3.json \
    --output_dir /output_qwen25vl7b_xd/$RUN_NAME \
    --model_name_or_path /Qwen2.5-VL-7B-Instruct \
    --dataset_name none \
    --image_folders /tasks-json-ui-doctor/tasks_json \
    --data_file_paths /tasks-json-ui-doctor/ui_doctor_dataset.jsonl \
    --freeze_vision_modules true \
    --max_prompt_length 4096 \
    --num_generations 5 \
    --per_device_train_batch_size 1 \
    --gradient_accumulation_steps 1 \
    --logging_steps 1 \
    --bf16 \
    --torch_dtype bfloat16 \
    --data_seed 42 \
    --report_to "tensorboard" \
    --logging_dir "/mnt/cluster123"
    --gradient_checkpointing true \
    --attn_implementation flash_attention_2 \
    --num_train_epochs 2 \
    --run_name $RUN_NAME \
    --save_steps 100 \
    --save_only_model true
