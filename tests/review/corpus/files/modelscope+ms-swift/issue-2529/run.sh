CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 NPROC_PER_NODE=8 swift sft \
  --model_type qwen2-vl-7b-instruct \
  --model_id_or_path /models/qwen/Qwen2-VL-7B-Instruct \
  --sft_type lora \
  --dataset /qwenvl/input/input.jsonl \
  --deepspeed default-zero3 
