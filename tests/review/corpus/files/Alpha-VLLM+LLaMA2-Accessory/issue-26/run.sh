torchrun --master_port=1112 --nproc_per_node=2 main_finetune.py \
--output_dir output/"$exp_name" --epochs 5 --warmup_epochs 1 \
--batch_size 1 --accum_iter 2 --num_workers 2 \
--max_words 512 \
--lr 3e-5 --min_lr 3e-6 --clip_grad 2 --weight_decay 0.02 \
--data_parallel "$data_parallel" --model_parallel_size 2 --checkpointing \
--llama_type llama --llama_config "$llama_config" --tokenizer_path "$tokenizer_path" \
--no_visual \
--pretrained_path "$pretrained_path" --pretrained_type="$pretrained_type" \
--data_config $data_config \
--precision bf16 \
2>&1 | tee -a output/"$exp_name"/output.log
