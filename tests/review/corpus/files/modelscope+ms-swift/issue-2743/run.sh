source /maindata/data/shared/public/liang.hu/conda/bin/activate
conda activate swift

NNODES=$WORLD_SIZE \
NODE_RANK=$RANK \
MASTER_ADDR=$MASTER_ADDR \
NPROC_PER_NODE=8 \
swift sft \
    --model /maindata/data/shared/public/chunli.peng/ckpt/Qwen2-VL-7B-Instruct/ \
    --train_type full \
    --torch_dtype bfloat16 \
    --per_device_train_batch_size 1 \
    --gradient_accumulation_steps 8 \
    --gradient_checkpointing_kwargs '{"use_reentrant": false}' \
    --dataset /maindata/data/shared/public/liang.hu/infer1/train_qwen2vl_sft_swift.jsonl \
    --output_dir /maindata/data/shared/public/liang.hu/infer1/qwen2_sft/test \
    --num_train_epochs 1 \
    --save_strategy 'no' \
    --eval_strategy 'no' \
    --logging_steps 1 \
    --warmup_ratio 0.05 \
    --report_to wandb \
    --gradient_checkpointing true \
    --freeze_vit true \
    --deepspeed zero2
