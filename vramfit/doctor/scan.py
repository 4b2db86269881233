"""One pass over the log: the failure events it contains, the run's settings, and where the run was.

State is per stream (a launcher prefix such as "[rank3]:" or "10.0.0.5:"), so interleaved ranks keep
their own tracebacks. Everything kept is bounded: a few events per kind, the last frames per stream,
the last progress bar.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from vramfit.doctor import patterns as P
from vramfit.doctor.lines import clean, split_prefix
from vramfit.doctor.phase import phase_of
from vramfit.doctor.settings import Settings
from vramfit.doctor.units import to_gib

MAX_EVENTS = 16  # per kind
MAX_STREAMS = 512
MAX_FRAMES = 48
MAX_FAILURES = 64
MAX_QUIET = 4096  # shapes (digits removed) of lines known to hold nothing of interest...
MAX_SHAPE = 1024  # ...if they are short enough to be worth remembering
DIGITS = b"0123456789"

TRAIN_BARS = {"", "train", "training", "trainer"}
EVAL_WORDS = ("val", "eval", "valid", "predict", "test")
LOAD_WORDS = ("loading", "load ")
GENERATION_WORDS = ("processed prompts", "generat", "rollout", "sampling")


@dataclass
class Event:
    kind: str  # a Diagnosis kind
    line: int
    text: str
    rank: int | None = None
    frames: tuple = ()
    phase: str = "unknown"  # from the frames, else from the lines before it
    step: int | None = None
    figures: dict = field(default_factory=dict)  # GiB floats, ints
    raw: dict = field(default_factory=dict)  # the same figures as printed, for quoting
    extra: dict = field(default_factory=dict)


class Stream:
    __slots__ = ("frames", "closed", "failure_rank", "root_next", "mismatch", "partial", "ipython", "wrapped")

    def __init__(self):
        self.frames: deque = deque(maxlen=MAX_FRAMES)
        self.closed = False  # the last traceback has ended in its exception line
        self.failure_rank: int | None = None  # in a ChildFailedError block
        self.root_next = False
        self.mismatch: Event | None = None  # collecting "- ds ... vs hf ..." lines
        self.partial: str | None = None  # a 'File "...' frame wrapped onto the next line
        self.ipython: tuple | None = None  # (exception, line, rank) of an IPython header awaiting its message
        self.wrapped: list | None = None  # [event, text so far, lines left]: an OOM message wrapped over lines


WRAP_LINES = 6  # lines an OOM message may be wrapped over
REPORT_LINES = 16  # lines after a host-RAM kill that still belong to its report (Ray's top-10 memory users)
COMPLETE = ("reserved in total by PyTorch)", "cached)", "but unallocated", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "environment-variables")


class Scan:
    def __init__(self):
        self.events: dict[str, list[Event]] = {}
        self.settings = Settings()
        self.failures: list[tuple[int, int]] = []  # torchrun ChildFailedError: (rank, exitcode)
        self.root_cause_rank: int | None = None
        # gradient checkpointing or ZeRO-3 seen: what makes the checkpointing errors below what they seem
        self.checkpointing_context = False
        self.lines = 0
        self.nul_bytes = 0
        self._streams: dict[str, Stream] = {}
        self._train_total: int | None = None
        self._train_marker: bytes | None = None  # b"/400 [" once the training bar is known
        self._train_bar: tuple[int, bytes] | None = None
        self._bars = {"evaluation": 0, "model_load": 0, "generation": 0}  # line of the last such bar
        self._hint = (0, "unknown")
        self._hint_text = ""
        self._quiet: set[bytes] = set()
        self._watch = 0  # lines to read whatever they say: the rest of a wrapped message or frame
        self._pending: tuple | None = None  # (stream key,) whose wrapped message or frame the next line continues
        self.exceptions: list[Event] = []  # Python exceptions that are no known failure (first few)
        self.silent_kills: list[Event] = []  # a launcher tearing down ranks that printed no error
        self.tracebacks = 0
        self.max_rank: int | None = None
        self.dangling: tuple = ()  # frames of a traceback the paste ends inside
        self.torn_down: set[str] = set()  # pids the launcher tore down after a rank failed
        self.report_phase: str | None = None  # where the lines just after a host-RAM kill say the node was

    # --- the per-line hot path ---

    def feed(self, lines: list[bytes]) -> None:
        for line in lines:
            self.lines += 1
            for segment in line.split(b"\r") if b"\r" in line else (line,):
                if b"%|" in segment:
                    self._bar_segment(segment)
                else:
                    self._plain(segment)

    def _plain(self, segment: bytes) -> None:
        """Look closer at lines with an anchor; remember the shapes of lines that turned out to say nothing
        (a warning repeated every step costs one lookup after its first time)."""
        if self._watch:
            self._watch -= 1
            self._line(segment)
            return
        shape = segment.translate(None, DIGITS)
        if shape in self._quiet:
            return
        if P.ANCHOR.search(segment) and self._line(segment):
            return
        if len(shape) <= MAX_SHAPE:
            if len(self._quiet) >= MAX_QUIET:
                self._quiet.clear()
            self._quiet.add(shape)

    def _bar_segment(self, segment: bytes) -> None:
        marker = self._train_marker
        at = segment.find(marker) if marker is not None else -1
        if at >= 0:  # the training bar: no regex, just what follows it on the line
            end = segment.find(b"]", at) + 1 or len(segment)
            self._train_bar = (self.lines, segment[:end])
            if end < len(segment):
                self._plain(segment[end:])
            return
        text = clean(segment)
        match = P.BAR.search(text)
        if not match:
            self._plain(segment)
            return
        desc = split_prefix(match.group("desc").strip())[2].strip().rstrip(":").strip().lower()
        total = int(match.group("total"))
        if self._train_total is None and desc in TRAIN_BARS and total > 1:
            self._set_train_total(total)
        if desc in TRAIN_BARS and total == self._train_total or desc.startswith("epoch"):
            self._train_bar = (self.lines, segment)
        elif desc == "" or desc.startswith(EVAL_WORDS):
            self._bars["evaluation"] = self.lines
        elif desc.startswith(LOAD_WORDS):
            self._bars["model_load"] = self.lines
        elif any(w in desc for w in GENERATION_WORDS):
            self._bars["generation"] = self.lines
        rest = text[match.end() :]
        if rest.strip():
            self._plain(rest.encode())

    def _set_train_total(self, total: int) -> None:
        self._train_total = total
        self._train_marker = b"/%d [" % total

    # --- lines worth a look ---

    def _stream(self, key: str) -> Stream:
        stream = self._streams.get(key)
        if stream is None:
            if len(self._streams) >= MAX_STREAMS:
                key = "*"
            stream = self._streams.setdefault(key, Stream())
        return stream

    def _line(self, raw: bytes) -> bool:
        """Read one anchored line; False when it turned out to say nothing."""
        key, rank, text, with_noise = split_prefix(clean(raw))
        stream = self._stream(key)
        if rank is not None and (self.max_rank is None or rank > self.max_rank):
            self.max_rank = rank
        self.settings.read_shapes(self.lines, text)
        pending, self._pending = self._pending, None
        if pending is not None and key in ("", pending[0]):  # wrapped lines lose the launcher's prefix
            owner = self._streams.get(pending[0], stream)
            if owner.wrapped is not None and self._unwrap(owner, text, key):
                return True
            if owner.partial is not None:
                joined, owner.partial = owner.partial + text.strip(), None
                if self._frame(joined, owner):
                    return True
            owner.wrapped = owner.partial = None
        at = text.find(P.TRACEBACK)
        if at > 0 and text[:at].strip() and not P.IPYTHON_HEADER.match(text):
            # a paste whose line breaks were lost (inline code): what precedes the traceback is its own line
            before = with_noise[: len(with_noise) - len(text) + at]
            if not self._event(text[:at], rank, stream, before):
                self._context_line(before, key, stream)
        header = P.IPYTHON_HEADER.match(text)
        if header:  # IPython prints the exception's name first, its message after the frames
            self._open(stream)
            stream.ipython = (header.group(1), self.lines, rank)
            return True
        if P.TRACEBACK in text:
            self._open(stream)
            rest = text[text.find(P.TRACEBACK) + len(P.TRACEBACK) :]
            if rest.count('File "') > 1:  # the whole traceback on this line: its line breaks were lost
                self._collapsed(rest, rank, stream, rest)
            elif 'File "' in rest:
                self._frame(rest, stream)
            return True
        if text.count('File "') > 1 and self._collapsed(text, rank, stream, with_noise):
            return True
        if self._frame(text, stream):
            return True
        if 'File "' in text and P.PARTIAL_FRAME.search(text):
            stream.partial = text.strip()
            self._pending, self._watch = (key,), 1
            return True
        if stream.mismatch is not None:
            item = P.HF_MISMATCH_ITEM.search(text)
            if item:
                items = stream.mismatch.extra["items"]
                if len(items) < MAX_EVENTS:
                    items.append(item.groups())
                return True
            stream.mismatch = None
        if self._event(text, rank, stream, with_noise):
            stream.ipython = None
            return True
        exception = P.EXCEPTION.match(text) if P.EXCEPTION_LINE.match(text) else None
        if exception:
            self._exception(exception, text, rank, stream)
            return True
        hint = P.SOURCE_HINT.search(text) if "(" in text else None
        if hint and not stream.closed and (stream.frames or "=" in text):
            # a source line under a frame, or the code line a paste starts with: 'denom = (exp_avg_sq.sqrt() ...'
            stream.frames.append(("<source>", hint.group(1)))
        return self._context_line(with_noise, key, stream) or bool(hint)

    def _collapsed(self, text: str, rank: int | None, stream: Stream, with_noise: str) -> bool:
        """A traceback pasted with its line breaks lost: every frame on one line, then what it raised."""
        frames = list(P.FRAMES[0].finditer(text))
        if len(frames) < 2:
            return False
        if stream.closed:
            stream.frames.clear()
            stream.closed = False
        for frame in frames:
            stream.frames.append((frame.group(1), frame.group(2)))
            self.settings.from_frame(frame.group(1), frame.group(2))
        tail = text[frames[-1].end() :]
        raised = P.RAISED_INLINE.search(tail)
        if raised:
            rest = tail[raised.start() :]
            if not self._event(rest, rank, stream, rest):
                self._exception(P.EXCEPTION.match(rest), rest, rank, stream)
        return True

    def _open(self, stream: Stream) -> None:
        stream.frames.clear()
        stream.closed = False
        stream.ipython = None
        self.tracebacks += 1

    def _frame(self, text: str, stream: Stream) -> bool:
        for regex in P.FRAMES:
            frame = regex.search(text)
            if frame:
                break
        else:
            return False
        if stream.closed:
            stream.frames.clear()
            stream.closed = False
        path, func = frame.group(1), frame.group(2)
        stream.frames.append((path, func))
        if "utils/checkpoint" in path or "stage3" in path:
            self.checkpointing_context = True
        self.settings.from_frame(path, func)
        return True

    def _exception(self, match, text: str, rank: int | None, stream: Stream) -> None:
        """An exception line that is no failure the doctor knows: kept in case nothing else explains the crash."""
        name = match.group(2)
        if name.startswith("nccl"):  # NCCL's result code inside a DistBackendError's message, not a new exception
            return
        frames = tuple(stream.frames) if not stream.closed else ()
        stream.closed = True
        stream.ipython = None
        if name in P.WRAPPERS or name.endswith("Warning") or len(self.exceptions) >= MAX_EVENTS:
            return
        event = Event("other_error", self.lines, text.strip(), rank, frames)
        event.phase = phase_of(frames)
        event.extra["exception"] = match.group(1)
        self.exceptions.append(event)

    def _not_memory(self, text: str, rank: int | None, stream: Stream, name: str = "NCCL error") -> None:
        """A failure that is no memory failure and that the exception line may not name (wrappers such as
        DistBackendError are not kept, and a paste may end before the exception)."""
        frames = tuple(stream.frames) if not stream.closed else ()
        stream.closed = True
        if len(self.exceptions) < MAX_EVENTS:
            event = Event("other_error", self.lines, text.strip(), rank, frames)
            event.phase = phase_of(frames)
            event.extra["exception"] = name
            self.exceptions.append(event)

    def _unwrap(self, stream: Stream, text: str, key: str) -> bool:
        """The next piece of an OOM message hard-wrapped over lines ('GPU  has a to' / 'tal capacity of ...')."""
        event, so_far, left = stream.wrapped
        piece = text.rstrip("\r")
        stripped = piece.strip()
        if not stripped or left <= 0 or P.TRACEBACK in piece or P.FRAMES[0].search(piece) or P.EXCEPTION_LINE.match(piece) or P.OOM.search(piece):
            stream.wrapped = None
            return False
        joint = so_far[-1:] + piece[:1]
        glue = "" if (not joint.strip() or len(joint) < 2 or len(so_far) >= 60) else " "
        so_far = so_far + glue + piece
        self._oom_parse(event, so_far)
        if any(word in so_far for word in COMPLETE):
            stream.wrapped = None
        else:
            stream.wrapped = [event, so_far, left - 1]
            self._pending, self._watch = (key or self._key_of(stream),), 1
        return True

    def _key_of(self, stream: Stream) -> str:
        return next((k for k, v in self._streams.items() if v is stream), "")

    def finish(self) -> None:
        """After the last line: IPython headers whose message never came, a paste that ends inside a traceback."""
        for stream in self._streams.values():
            if stream.ipython is not None:
                name, line, rank = stream.ipython
                frames = tuple(stream.frames)
                if "OutOfMemory" in name:
                    event = Event("cuda_oom", line, name, rank, frames)
                    event.phase = phase_of(frames)
                    if event.phase == "unknown":
                        event.phase = self._where()
                    self.events.setdefault("cuda_oom", []).append(event)
                elif name.split(".")[-1] not in P.WRAPPERS and len(self.exceptions) < MAX_EVENTS:
                    event = Event("other_error", line, name, rank, frames)
                    event.phase = phase_of(frames)
                    event.extra["exception"] = name
                    self.exceptions.append(event)
            if stream.frames and not stream.closed:
                self.dangling = tuple(stream.frames)
        # ranks per node from the launcher's teardown: the ranks it stopped plus the one that failed
        failed = {rank for rank, _ in self.failures}
        if self.torn_down and "nproc_per_node" not in self.settings.values and len(failed) <= 1:
            self.settings.values["nproc_per_node"] = len(self.torn_down) + max(1, len(failed))

    def _event(self, text: str, rank: int | None, stream: Stream, with_noise: str = "") -> bool:
        """Record the failure this line reports, if any."""
        oom = P.OOM.search(text)
        if oom:
            event = self._add("cuda_oom", text, rank, stream)
            if "HIP" in text:
                event.extra["platform"] = "rocm"
            elif "NPU out of memory" in text:
                event.extra["platform"] = "npu"  # Ascend torch_npu
            elif "XPU" in text or "device memory on current platform" in text or "UR_RESULT_ERROR" in text:
                event.extra["platform"] = "xpu"  # Intel
            if P.VLLM_KV.search(text) or P.VLLM_ALLOCATOR.search(text) or any("vllm" in path for path, _ in event.frames):
                event.extra["vllm"] = True
                if event.phase == "unknown" or P.VLLM_KV.search(text) or P.VLLM_ALLOCATOR.search(text):
                    event.phase = "generation"
            self._oom_parse(event, text)
            if "Tried to allocate" in text and not any(word in text for word in COMPLETE):
                stream.wrapped = [event, text, WRAP_LINES]
                self._pending, self._watch = (self._key_of(stream),), 1
            return True
        shm = P.SHM.search(text)
        if shm:
            self._add("shm_exhausted", text, rank, stream)
            return True
        if P.HOST_KILL.search(text) or P.DATALOADER_KILL.search(text):
            hint = next((phase for regex, phase in P.HINTS if regex.search(text)), None)
            if hint:  # "Loading checkpoint shards: 57% 4/7 [...]ERROR:...failed (exitcode: -9)"
                self._hint, self._hint_text = (self.lines, hint), text
            killed = P.KILLED_RANK.search(text)
            if stream.failure_rank is not None and text.lstrip().startswith(("exitcode", "traceback")):
                rank = stream.failure_rank
            elif killed:
                rank = int(killed.group(1) or killed.group(2))
            event = self._add("host_oom", text, rank, stream, frames=False)
            event.extra["dataloader"] = bool(P.DATALOADER_KILL.search(text))
            rss = P.KILLED_RSS.search(text)
            if rss:
                event.figures["killed_rss_gib"] = round(int(rss.group(1)) / 2**20, 2)
            self._failure(text, stream)
            return True
        silent = P.SILENT_KILL.search(with_noise or text)
        if silent:
            if len(self.torn_down) < MAX_FAILURES:  # the launcher's children on this node, one line each
                self.torn_down.add(silent.group(1) or silent.group(2))
            if "sigkill_handler" in with_noise:  # DeepSpeed's launcher (deepspeed/launcher/launch.py)
                self.settings.values.setdefault("uses_deepspeed", True)
            if len(self.silent_kills) < MAX_EVENTS:
                event = Event("host_oom", self.lines, text.strip(), rank)
                event.phase = self._where()
                event.extra["silent"] = True
                self.silent_kills.append(event)
            return True
        mismatch = P.COLLECTIVE_MISMATCH.search(text)
        if mismatch:  # the event is the message itself, not the C++ enforce prefix before it
            self._add("collective_mismatch", text[mismatch.start() :], rank, stream)
            return True
        match = P.NCCL_TIMEOUT.search(text)
        if not match and "ccl" in text.lower() and P.NCCL_SETUP.search(text):  # not memory, and no rank kept the others waiting
            if not any(e.extra.get("exception") == "NCCL error" for e in self.exceptions):  # its detail lines follow
                self._not_memory(text, rank, stream)
            return True
        if P.DEVICE_ASSERT.search(text):
            if not any(e.extra.get("exception") == "device-side assertion" for e in self.exceptions):
                self._not_memory(text, rank, stream, "device-side assertion")
            return True
        if match or P.NCCL_ERROR.search(text):
            in_text = P.RANK_IN_TEXT.search(text)
            event = self._add("nccl_timeout", text, int(in_text.group(1)) if in_text else rank, stream, close=bool(match))
            gloo = P.GLOO_TIMEOUT.search(text)
            if gloo:  # CPU collectives: no NCCL settings apply
                event.extra["backend"] = "gloo"
                if gloo.group("ms"):
                    event.figures["gloo_timeout_ms"] = int(gloo.group("ms"))
            if match:
                event.extra.update(op=match.group("op"), seq=int(match.group("seq")))
                event.figures["timeout_ms"] = int(match.group("timeout"))
                if match.group("ran"):
                    event.figures["ran_for_ms"] = int(match.group("ran"))
            return True
        match = P.DS_BATCH.search(text)
        if match:
            event = self._add("batch_mismatch", text, rank, stream)
            names = ("train_batch_size", "micro_batch_per_gpu", "gradient_accumulation_steps", "world_size")
            event.figures.update(zip(names, map(int, match.groups())))
            return True
        if P.HF_MISMATCH in text:
            stream.mismatch = self._add("config_mismatch", text, rank, stream)
            stream.mismatch.extra["items"] = []
            return True
        return self._grpo(text, rank, stream) or self._checkpointing(text, rank, stream)

    def _grpo(self, text: str, rank: int | None, stream: Stream) -> bool:
        old, new_eval = P.GRPO_GLOBAL_OLD.search(text), P.GRPO_EVAL_NEW.search(text)
        gen_batch, gen_global = P.GRPO_GEN_BATCH.search(text), P.GRPO_GEN_GLOBAL.search(text)
        too_few = P.GRPO_MIN.search(text)
        if not (old or new_eval or gen_batch or gen_global or too_few):
            return False
        event = self._add("grpo_divisibility", text, rank, stream)
        f, extra = event.figures, event.extra
        if old:
            extra["split"] = old.group(1)
            processes, per_device, generations = map(int, old.groups()[1:])
            f.update(num_processes=processes, per_device_batch_size=per_device, num_generations=generations)
            valid = P.GRPO_VALID.search(text)
            if valid:
                extra["valid"] = [int(v) for v in valid.group(1).replace(",", " ").split()]
        elif new_eval:
            per_device, processes, generations = map(int, new_eval.groups())
            f.update(num_processes=processes, per_device_batch_size=per_device, num_generations=generations)
            # TRL 1.x has a separate num_generations_eval
            extra.update(split="eval", generations_key="num_generations_eval")
        elif gen_batch:
            f.update(generation_batch_size=int(gen_batch.group(1)), num_generations=int(gen_batch.group(2)))
        elif gen_global:
            f.update(generation_batch_size=int(gen_global.group(1)), global_batch_size=int(gen_global.group(2)))
        elif too_few.group(1):
            f["num_generations"] = int(too_few.group(1))
        return True

    def _checkpointing(self, text: str, rank: int | None, stream: Stream) -> bool:
        if "use_reentrant" in text:
            self.checkpointing_context = True
        if not P.CHECKPOINTING.search(text):
            return False
        self._add("checkpointing_error", text, rank, stream)
        return True

    def _oom_parse(self, event: Event, text: str) -> None:
        event.text = text.strip()
        for name, regexes in P.OOM_FIGURES.items():
            for regex in regexes:
                match = regex.search(text)
                if match:
                    event.raw[name] = match.group(1)
                    break
        self._oom_figures(event)

    def _oom_figures(self, event: Event) -> None:
        raw, f = event.raw, event.figures
        for name in ("requested", "total", "free", "allocated", "reserved_unallocated", "in_use"):
            if name in raw:
                f[f"{name}_gib"] = to_gib(raw[name])
        if "reserved_total" in raw and "allocated" in raw and "reserved_unallocated" not in raw:
            # torch 1.4-2.0 print reserved in total, allocated included; 1.0-1.3's "cached" and 2.1+'s
            # "reserved but unallocated" are already net of it and are never subtracted again
            spare = round(to_gib(raw["reserved_total"]) - f["allocated_gib"], 6)
            if spare >= 0:
                f["reserved_unallocated_gib"] = spare
        if "total_gib" in f:  # NVML's figures under WSL / some containers are nonsense (17179869184 GiB)
            for name in ("in_use_gib", "allocated_gib", "free_gib"):
                if f.get(name, 0) > 1.05 * f["total_gib"]:
                    del f[name]
                    raw.pop(name[:-4], None)
                    event.extra["bogus_figures"] = True
        if "gpu" in raw:
            f["gpu"] = int(raw["gpu"])
        self._other_processes(event)

    def _other_processes(self, event: Event) -> None:
        """GPU memory held by other processes, from torch 2.1+'s list of every process on the GPU. When the
        message names this process's own total, every listed process is another; when it does not (a
        container hides the PID), this process is the listed one whose total is closest above what PyTorch
        holds, and only the rest are others."""
        listed = [(int(pid), to_gib(size)) for pid, size in P.PROCESS_IN_USE.findall(event.text)]
        own = P.SELF_IN_USE.search(event.text)
        total = event.figures.get("total_gib")
        if not listed or event.extra.get("bogus_figures") or (total and max(size for _, size in listed) > total):
            return  # none listed, or NVML reporting impossible figures (WSL, some containers)
        if own and to_gib(own.group(1)) > 0:
            others = listed
        else:
            f = event.figures
            held = f.get("allocated_gib", 0) + f.get("reserved_unallocated_gib", 0)
            mine = [p for p in listed if p[1] >= 0.98 * held]
            if not held or not mine:
                return
            me = min(mine, key=lambda p: p[1])
            others = [p for p in listed if p is not me]
        total = round(sum(size for _, size in others), 6)
        if total > 0:
            event.figures["other_processes_gib"] = total
            event.extra["other_processes"] = others

    def _failure(self, text: str, stream: Stream) -> None:
        """An "exitcode : N" line of a ChildFailedError block."""
        exit_code = P.FAILURE_EXIT.match(text)
        if exit_code and stream.failure_rank is not None:
            self._record_failure(stream.failure_rank, int(exit_code.group(1)))

    def _record_failure(self, rank: int, code: int) -> None:
        if len(self.failures) < MAX_FAILURES:
            self.failures.append((rank, code))

    def _context_line(self, text: str, key: str, stream: Stream) -> bool:
        """Lines that say where the run is, or what it was configured with; False if this one does not."""
        failure_rank = P.FAILURE_RANK.match(text)
        if failure_rank:
            stream.failure_rank = int(failure_rank.group(1))
            if stream.root_next:
                self.root_cause_rank, stream.root_next = stream.failure_rank, False
            return True
        if P.FAILURE_EXIT.match(text):
            self._failure(text, stream)
            return True
        if P.ROOT_CAUSE in text:
            stream.root_next = True
            return True
        launcher_exit = P.LAUNCHER_EXIT.search(text)
        if launcher_exit:
            rank = int(launcher_exit.group("rank") or launcher_exit.group("ds_rank"))
            self._record_failure(rank, int(launcher_exit.group("code") or launcher_exit.group("ds_code")))
            if self.root_cause_rank is None:
                self.root_cause_rank = rank
            return True
        hint = next((phase for regex, phase in P.HINTS if regex.search(text)), None)
        if hint:
            self._hint, self._hint_text = (self.lines, hint), text
            kills = self.events.get("host_oom")
            if kills and self.report_phase is None and self.lines - kills[-1].line <= REPORT_LINES:
                self.report_phase = hint  # the kill report's own process table (Ray lists what the node ran)
        step = P.STEP.search(text)
        if step:
            self._train_bar = (self.lines, step.group(0).encode())
        learned = self.settings.read(key, text)
        if self._train_total is None and "max_steps" in self.settings.values:
            self._set_train_total(self.settings.values["max_steps"])
        return bool(hint or step or learned)

    # --- events ---

    def _add(self, kind: str, text: str, rank: int | None, stream: Stream, frames: bool = True, close: bool = True) -> Event:
        """A new event with its rank, frames, phase and step; kept only while under MAX_EVENTS. An event that
        does not `close` the traceback leaves its frames to the next line (an NCCL error whose 'Last error'
        lines say the CUDA failure underneath)."""
        event = Event(kind, self.lines, text.strip(), rank)
        if frames and not stream.closed:
            event.frames = tuple(stream.frames)
        stream.closed = stream.closed or close
        event.phase = phase_of(event.frames)
        if event.phase == "unknown":
            event.phase = self._where()
        event.step = self._step()
        kept = self.events.setdefault(kind, [])
        if len(kept) < MAX_EVENTS:
            kept.append(event)
        return event

    def _where(self) -> str:
        """The phase the lines so far point at: the latest progress bar or banner."""
        candidates = [self._hint, *((line, phase) for phase, line in self._bars.items())]
        if self._train_bar:
            candidates.append((self._train_bar[0], "training"))
        line, phase = max(candidates)
        return "unknown" if phase == "training" or line == 0 else phase

    def _step(self) -> int | None:
        """The last training step the progress bar (or a step log line) showed."""
        if not self._train_bar:
            return None
        text = self._train_bar[1].decode("utf-8", "replace")
        bar = P.BAR.search(text)
        if bar:
            return int(bar.group("n"))
        logged = P.STEP.search(text)
        return int(logged.group(1)) if logged else None
