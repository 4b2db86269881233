torchrun --nproc_per_node=$NPROC_PER_NODE \
         --master_addr=$MASTER_ADDR \
         --master_port=$MASTER_PORT \
       /home/deploy/adkWorkspace/Qwen2.5-VL/qwen-vl-finetune/qwenvl/train/train_qwen.py \
         \
         --model_name_or_path $MODEL_PATH \
         --tune_mm_llm True \
         --tune_mm_vision True \
         --tune_mm_mlp True \
         --dataset_use $DATASETS \
         --output_dir $OUTPUT_DIR \
         --cache_dir $CACHE_DIR \
         \
         --bf16 \
         --per_device_train_batch_size 4 \
         --gradient_accumulation_steps 4 \
         \
         --learning_rate 2e-7 \
         --mm_projector_lr 1e-5 \
         --vision_tower_lr 1e-6 \
         --optim adamw_torch \
         \
         --model_max_length 8192 \
         --data_flatten True \
         \
         --max_pixels 1003520 \
         --min_pixels 200704 \
         \
         --base_interval 2 \
         --video_max_frames 8 \
         --video_min_frames 4 \
         --video_max_frame_pixels 1302528 \
         --video_min_frame_pixels 200704 \
         \
         --num_train_epochs 3 \
         --warmup_ratio 0.03 \
         --lr_scheduler_type "cosine" \
         --weight_decay 0.01 \
         \
         --logging_steps 10 \
         --save_steps 100 \
         --save_total_limit 3
