CUDA_VISIBLE_DEVICES=6,7 swift rollout --model $MODEL --data_parallel_size 2
