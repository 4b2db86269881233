run_qwen_14b_deepspeed() {
    deepspeed -i localhost:0,1,2,3,4,5,6,7 --master_port=9902 src/train_bash.py \
    --deepspeed ds_config_zero2.json \
    --stage sft \
    --model_name_or_path /home/public/llm/Qwen-14B-Chat \
    --do_train True \
    --finetuning_type lora \
    --template chatml \
    --lora_target c_attn \
    --dataset_dir data \
    --dataset alpaca_zh \
    --cutoff_len 1024 \
    --learning_rate 5e-05 \
    --per_device_train_batch_size 1 \
    --gradient_accumulation_steps 12 \
    --lr_scheduler_type cosine \
    --output_dir saves/Qwen-14B-Chat/lora/qwen-14b-alpaca-zh-sample5000-deepspeed-test \
    --overwrite_output_dir \
    --max_samples 5000 \
    --num_train_epochs 3.0 \
    --logging_steps 10 \
    --save_steps 800 \
    --val_size 0.1 \
    --evaluation_strategy no \
    --eval_steps 800 \
    --plot_loss True \
    --fp16 True \
    --load_best_model_at_end False 
}
