"""The launch-script reader: variables, continuations, comments, quoting, wrappers, never running anything."""

from __future__ import annotations

from vramfit.review import shell


def launch(text: str) -> shell.Command:
    """The one torchrun command of `text`."""
    commands = [c for c in shell.parse(text).commands if c.argv[0] == "torchrun"]
    assert len(commands) == 1, commands
    return commands[0]


def test_variables_resolve_where_the_script_defines_them():
    script = """
export GPUS=8
BS=${BS:-4}
NAME="${RUN:-grpo}-$GPUS"
torchrun --nproc_per_node $GPUS train.py --per_device_train_batch_size ${BS} --run_name "$NAME" --seed ${SEED}
"""
    argv = launch(script).argv
    assert argv[1:3] == ["--nproc_per_node", "8"]
    assert argv[argv.index("--per_device_train_batch_size") + 1] == "4"
    assert argv[argv.index("--run_name") + 1] == "grpo-8"
    assert argv[argv.index("--seed") + 1] == "${SEED}"  # never defined: stays visible as unresolved


def test_a_prefix_assignment_sees_the_ones_before_it_as_bash_does():
    """`nproc_per_node=2 NPROC_PER_NODE=$nproc_per_node swift sft` (modelscope/ms-swift#5292, continued over lines): bash
    gives NPROC_PER_NODE 2 (each assignment is expanded after the ones before it); a name set nowhere stays unresolved."""
    text = "nproc_per_node=2 \\\nCUDA_VISIBLE_DEVICES=0,1 \\\nNPROC_PER_NODE=$nproc_per_node \\\nswift sft --model m\nA=$UNSET B=1 swift sft\n"
    first, second = shell.parse(text).commands
    assert first.environment["NPROC_PER_NODE"] == "2" and first.environment["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert second.environment["A"] == "$UNSET"


def test_default_is_not_used_when_the_variable_is_set_and_assign_default_sticks():
    script = "BS=2\nX=${BS:-16}\n: ${LR:=1e-5}\ntorchrun t.py --a $X --lr $LR\n"
    assert launch(script).argv[-4:] == ["--a", "2", "--lr", "1e-5"]


def test_arithmetic_truncates_like_bash_and_unknown_names_stay_unresolved():
    script = "BATCH=128\nPER=8\nGPUS=6\nGA=$((BATCH / PER / GPUS))\nP=2$(($RANDOM % 10))\ntorchrun t.py --ga $GA --port $P\n"
    argv = launch(script).argv
    assert argv[argv.index("--ga") + 1] == "2"
    assert argv[argv.index("--port") + 1] == "2$((...))"


def test_line_continuations_and_flag_equals_value():
    script = "torchrun --nproc_per_node=4 \\\n    train.py \\\n    --learning_rate=2e-5 \\\n    --bf16 True\n"
    command = launch(script)
    assert command.argv == ["torchrun", "--nproc_per_node=4", "train.py", "--learning_rate=2e-5", "--bf16", "True"]
    assert command.line == 1


def test_multi_line_double_quoted_variable_is_word_split_when_unquoted():
    script = 'N=2\nARGS="\n    --nproc_per_node $N \\\n    --nnodes 1\n"\ntorchrun $ARGS train.py\n'
    assert launch(script).argv == ["torchrun", "--nproc_per_node", "2", "--nnodes", "1", "train.py"]


def test_single_quotes_are_not_expanded_and_command_substitution_is_not_run():
    script = "X=1\ntorchrun t.py --a '$X' --host $(hostname -i) --b `date`\n"
    assert launch(script).argv[2:] == ["--a", "$X", "--host", "$(...)", "--b", "$(...)"]


def test_a_comment_inside_a_continued_command_cuts_the_rest_off():
    script = "torchrun t.py \\\n    --a 1 \\\n    # --b 2 \\\n    --c 3 \\\n    --d 4\n"
    parsed = shell.parse(script)
    assert parsed.commands[0].argv == ["torchrun", "t.py", "--a", "1"]
    assert parsed.stray == [(4, ["--c", "3", "--d", "4"])]


def test_redirections_pipes_and_here_documents_are_not_arguments():
    script = "torchrun t.py --a 1 2>&1 | tee -a log.txt\ncat > ds.json <<EOF\n--not 1\nEOF\ntorchrun u.py > out.log\n"
    parsed = shell.parse(script)
    runs = [c.argv for c in parsed.commands if c.argv[0] == "torchrun"]
    assert runs == [["torchrun", "t.py", "--a", "1"], ["torchrun", "u.py"]]
    assert parsed.stray == []


def test_bash_c_sees_exported_variables_only():
    script = "export NNODES=2\nGPUS=8\nsrun --nodes=$NNODES bash -c 'torchrun --nnodes $NNODES --nproc_per_node $GPUS t.py'\n"
    command = launch(script)
    assert command.argv == ["torchrun", "--nnodes", "2", "--nproc_per_node", "$GPUS", "t.py"]
    assert command.srun == {"nodes": "2", "srun": ""}


def test_srun_and_sbatch_options_are_kept_as_hardware_hints():
    script = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:8\nsrun -N 2 --ntasks-per-node 8 python -u train.py --a 1\n"
    parsed = shell.parse(script)
    assert parsed.sbatch["nodes"] == "2" and parsed.sbatch["gpus-per-node"] == "8"
    assert parsed.variables["SLURM_NNODES"] == "2"
    assert parsed.commands[0].argv == ["python", "-u", "train.py", "--a", "1"]
    assert parsed.commands[0].srun == {"nodes": "2", "ntasks-per-node": "8", "srun": ""}


def test_the_launch_environment_is_the_exported_variables_and_prefixes():
    script = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\nLOCAL=1\nCUDA_VISIBLE_DEVICES=0,1 torchrun t.py\n"
    assert launch(script).environment == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "CUDA_VISIBLE_DEVICES": "0,1"}


def test_the_scripts_folder_and_cd_give_the_launchs_working_directory():
    script = (
        'ROOT="$( cd "$( dirname "${BASH_SOURCE[0]}" )/.." && pwd )"\nHERE=$(dirname "$0")\n'
        "cd ${ROOT}/src/app\ntorchrun --nproc_per_node 2 train.py --out $HERE\n"
    )
    parsed = shell.parse(script, script_dir="/repo/run_scripts")
    assert parsed.variables["ROOT"] == "/repo" and parsed.variables["HERE"] == "/repo/run_scripts"
    assert launch(script).cwd is None  # no script folder known: the `cd` target stays unresolved
    [command] = [c for c in parsed.commands if c.argv[0] == "torchrun"]
    assert command.cwd == "/repo/src/app"


def test_a_launch_inside_ssh_and_a_container_is_found():
    from vramfit.review.sources import _launcher_of

    script = 'ssh -p 22 $host "cd /w && sudo -E docker-compose -f d.yml run --rm trainer torchrun --nproc_per_node=8 src/train.py --bf16"\n'
    [command] = [c for c in shell.parse(script).commands if "torchrun" in c.argv]
    launcher, tokens = _launcher_of(command.argv)
    assert launcher == "torchrun" and tokens == ["--nproc_per_node=8", "src/train.py", "--bf16"]


def test_a_hash_inside_a_word_is_not_a_comment():
    """bash opens a comment only where `#` starts a word: ms-swift's `--dataset AI-MO/NuminaMath-TIR#5000` (a subset
    size) keeps the rest of the command, and `# ...` after a space is still a comment."""
    script = "torchrun t.py --dataset AI-MO/NuminaMath-TIR#5000 \\\n    --deepspeed zero3 # the preset\n"
    assert launch(script).argv == ["torchrun", "t.py", "--dataset", "AI-MO/NuminaMath-TIR#5000", "--deepspeed", "zero3"]


def test_read_d_heredoc_stores_the_document_in_the_variable():
    """OpenRLHF's examples: `read -r -d '' training_commands <<EOF ... EOF`, then `deepspeed --module $training_commands`.
    An unquoted delimiter joins backslash-continued lines and expands variables; a quoted one keeps the text."""
    from vramfit.review import shell

    text = (
        "LEN=2048\n"
        "read -r -d '' cmd <<EOF\n"
        "openrlhf.cli.train_sft \\\n"
        "   --data.max_len $LEN \\\n"
        "   --model.model_name_or_path meta-llama/Meta-Llama-3-8B\n"
        "EOF\n"
        "read -r -d '' raw <<'EOF'\n"
        "--x $LEN\n"
        "EOF\n"
        "deepspeed --module $cmd\n"
    )
    script = shell.parse(text)
    assert script.variables["raw"] == "--x $LEN"
    launch = [c for c in script.commands if c.argv[0] == "deepspeed"][0]
    assert launch.argv == [
        "deepspeed",
        "--module",
        "openrlhf.cli.train_sft",
        "--data.max_len",
        "2048",
        "--model.model_name_or_path",
        "meta-llama/Meta-Llama-3-8B",
    ]


def test_a_quote_never_closed_is_said_and_the_command_read_as_if_it_closed():
    script = shell.parse('torchrun --nproc_per_node=2 train.py --fsdp "full_shard auto_wrap" --wrap \'LlamaDecoderLayer\n')
    [command] = script.commands
    assert command.argv[-2:] == ["--wrap", "LlamaDecoderLayer"]
    assert script.unclosed == [(1, "'", "--wrap")] and not script.stray
    assert shell.parse('torchrun t.py --a "x\n').unclosed == [(1, '"', "--a")]


def test_a_sourced_file_sets_the_variables_of_the_launch(tmp_path):
    """`source env.sh` (or `. ./env.sh`) runs env.sh in the script's own shell: its variables reach the launch below."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "env.sh").write_text("export MODEL=Qwen/Qwen2.5-7B\nNGPU=4\n")
    script = shell.parse("source conf/env.sh\n. ./conf/missing.sh\ntorchrun --nproc_per_node $NGPU train.py --model $MODEL\n", script_dir=str(tmp_path))
    [command] = script.commands
    assert command.argv[2:] == ["4", "train.py", "--model", "Qwen/Qwen2.5-7B"] and command.environment["MODEL"] == "Qwen/Qwen2.5-7B"
    looping = tmp_path / "loop.sh"
    looping.write_text("source loop.sh\nX=1\n")  # a file sourcing itself stops
    assert shell.parse("source loop.sh\n", script_dir=str(tmp_path)).variables["X"] == "1"


def test_eval_of_a_command_held_in_a_variable_runs_it_with_its_quotes():
    """FlagEmbedding's examples/finetune scripts build `cmd="torchrun ... -m FlagEmbedding.finetune..."` and run
    `eval $cmd`: bash joins the words and parses them again, so the quotes inside the value group words."""
    text = (
        'model_args="--model_name_or_path BAAI/bge-large-en-v1.5"\n'
        'cmd="torchrun --nproc_per_node 2 \\\n    -m FlagEmbedding.finetune.embedder.encoder_only.base \\\n'
        "    $model_args --query_instruction_for_retrieval 'Represent this: ' --fp16\"\n"
        'echo $cmd\neval $cmd\neval "$cmd"\n'
    )
    first, second = [c for c in shell.parse(text).commands if c.argv[0] == "torchrun"]
    assert first.argv == second.argv == [
        "torchrun", "--nproc_per_node", "2", "-m", "FlagEmbedding.finetune.embedder.encoder_only.base",
        "--model_name_or_path", "BAAI/bge-large-en-v1.5", "--query_instruction_for_retrieval", "Represent this: ", "--fp16",
    ]  # fmt: skip


def test_old_style_arithmetic_and_a_backslash_ending_the_file():
    """VideoLLaMA2's scripts write `GRADIENT_ACCUMULATION_STEPS=$[$GLOBAL/($WORLD*$NPROC*$LOCAL)]` (bash's older
    spelling of `$(( ))`); Mantis's end the file with `--resume_from_checkpoint "$x" \\` and no newline, which bash
    reads as the end of the command (bash -n accepts both)."""
    text = 'G=128\nL=4\nN=8\nGA=$[$G/(1*$N*$L)]\ntorchrun t.py --ga $GA --resume "$x" \\'
    script = shell.parse(text)
    assert launch(text).argv == ["torchrun", "t.py", "--ga", "4", "--resume", "$x"]
    assert not script.unclosed and not script.stray
