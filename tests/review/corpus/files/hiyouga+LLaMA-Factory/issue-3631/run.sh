USE_MODELSCOPE_HUB=1 CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 python -m torch.distributed.run \
        --nproc_per_node 8 \
        --nnodes 1 \
        --standalone \
        src/train.py examples/water/0508_wa_llama3_8b_lora_sft.yaml 
