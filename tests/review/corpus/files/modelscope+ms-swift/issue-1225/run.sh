CUDA_VISIBLE_DEVICES=0 \
swift sft \
    --model_type glm4v-9b-chat \
    --dataset ocr-vqa#1000 \
    --num_train_epochs 1 \
    --sft_type lora \
    --ddp_find_unused_parameters true \
    --eval_steps 150 \
    --save_steps 150 \
