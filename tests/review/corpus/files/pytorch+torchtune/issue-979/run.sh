tune run lora_finetune_single_device --config llama3/8B_lora_single_device \
dataset=torchtune.datasets.slimorca_dataset dataset.max_seq_len=8192
