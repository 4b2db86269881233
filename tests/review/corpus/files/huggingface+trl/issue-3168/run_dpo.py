from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer

model = AutoModelForCausalLM.from_pretrained("/home/share/models/Qwen2.5-0.5B-Instruct")
tokenizer = AutoTokenizer.from_pretrained("/home/share/models/Qwen2.5-0.5B-Instruct")
# dataset = load_dataset("trl-lib/ultrafeedback_binarized", split="train")
dataset = load_dataset("parquet", data_files="~/data/ultrafeedback_binarized/data/*.parquet")["train"]
training_args = DPOConfig(output_dir="Qwen2.5-0.5B-DPO")
trainer = DPOTrainer(
    model=model,
    args=training_args,
    train_dataset=dataset,
    processing_class=tokenizer
)
trainer.train()
