"""A model of the ping-pong tile's synchronisation (`glmcheck/kernels/gluon/pingpong.py`), run on
the CPU under random interleavings to find buffer races the GPU may only show now and then.

The three partitions (producer, even and odd consumer warpgroups) are generators that issue the
kernel's barrier waits and arrives, shared-memory reads and writes, and asynchronous operations in
the kernel's order, over one union group's blocks, taken in pairs; with an odd block count the last
pair holds only its even block (a half pair: no odd block is gathered or computed). `PipelineOptions`
only plants bugs, to show that the model catches them. A scheduler runs one step at a time, picked at random among the
partitions that can move and the asynchronous operations that may finish:
  * a warpgroup MMA reads its operand buffers from issue until it completes; a warpgroup's MMA
    groups complete in issue order, and `wait_group(k)` blocks until at most k are in flight;
  * a gather writes its piece's buffers from issue until it lands (gathers land in issue order,
    as cp.async's barrier arrive covers every earlier copy of the thread), then arrives on the
    piece's full barrier;
  * barriers count completed phases; a wait for phase k that finds the barrier two phases ahead
    (a parity wait would then alias) is a violation;
  * Q's copy is a gather that lands before the first piece (it is issued first by the same
    producer threads) and arrives on no barrier.
A violation is: a write to a buffer that an unfinished read uses, a read of a buffer a gather is
still writing, or a read that finds another pair's data (e.g. a max overwritten before it was
read). The model mirrors the kernel by hand: change one with the other.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PipelineOptions:
    """Planted bugs for the model's own test (the defaults are the kernel): odd_release_outstanding
    > 1 frees 0R while O += P0 V0 may still read it; even_release_unwaited frees 0L without waiting
    for the MMA that reads it; odd_block_release_unwaited frees 1L the same way;
    next_left_unwaited issues the next pair's S0 left half without waiting for 0L's refill;
    odd_p_early stores P1 before S1 (so before 1L's refill, which says that the even warpgroup's
    O += P1 V1 of the previous pair is done); peer_max_unwaited reads M0 without waiting for it;
    half_p0_unwaited has the odd warpgroup's half pair read P0 without waiting for it;
    odd_stages_out_into names the buffer the odd warpgroup stages its O half in (the kernel: main0 R, the piece it
    reads last) and stage_out_before_sums stages O before the row-sum exchange."""

    odd_release_outstanding: int = 1
    even_release_unwaited: bool = False
    odd_block_release_unwaited: bool = False
    next_left_unwaited: bool = False
    odd_p_early: bool = False
    peer_max_unwaited: bool = False
    half_p0_unwaited: bool = False
    odd_stages_out_into: str = "main0 R"
    stage_out_before_sums: bool = False


class ProtocolViolation(AssertionError):
    """The modelled schedule broke a buffer or barrier rule."""


@dataclass
class Buffer:
    content: tuple = ("empty", -1)
    readers: set = field(default_factory=set)  # ids of MMAs in flight that read it
    writing: bool = False  # a gather into it has not landed


# A partition step: ("wait", predicate, what) blocks until predicate(); ("do", action) runs at once.
Step = tuple
Partition = Generator[Step, None, None]


class Machine:
    """Buffers, barriers and the asynchronous operations in flight."""

    def __init__(self) -> None:
        self.buffers: dict[str, Buffer] = {}
        self.phases: dict[str, int] = {}
        self.mma_queues: dict[str, deque] = {"even": deque(), "odd": deque()}
        self.gathers: deque = deque()
        self.next_id = 0

    def buffer(self, name: str) -> Buffer:
        return self.buffers.setdefault(name, Buffer())

    def arrive(self, barrier: str) -> None:
        """One arrival, which completes a phase (every barrier of the tile counts one)."""
        self.phases[barrier] = self.phases.get(barrier, 0) + 1

    def phase_done(self, barrier: str, k: int) -> bool:
        """Phase k (0-based) of `barrier` has completed; a barrier two phases ahead is a violation."""
        done = self.phases.get(barrier, 0)
        if done > k + 1:
            raise ProtocolViolation(f"{barrier}: waiting for phase {k} but {done} phases done (parity aliasing)")
        return done > k

    def read(self, name: str, expected: tuple, who: str) -> None:
        buf = self.buffer(name)
        if buf.writing:
            raise ProtocolViolation(f"{who} reads {name} while a gather is writing it")
        if buf.content != expected:
            raise ProtocolViolation(f"{who} reads {name}: expected {expected}, found {buf.content}")

    def write(self, name: str, content: tuple, who: str) -> None:
        buf = self.buffer(name)
        if buf.readers or buf.writing:
            raise ProtocolViolation(f"{who} writes {name} while it is still read or written")
        buf.content = content

    def issue_mma(self, warpgroup: str, reads: dict[str, tuple], who: str) -> None:
        self.next_id += 1
        for name, expected in reads.items():
            self.read(name, expected, who)
            self.buffer(name).readers.add(self.next_id)
        self.mma_queues[warpgroup].append((self.next_id, list(reads)))

    def issue_gather(self, piece: str, names: list[str], content: tuple, who: str) -> None:
        for name in names:
            buf = self.buffer(name)
            if buf.readers:
                raise ProtocolViolation(f"{who} gathers into {name} while an MMA still reads it")
            buf.writing = True
        self.gathers.append((piece, names, content))

    def completions(self) -> list[Callable[[], None]]:
        """The asynchronous operations that may finish now (the oldest of each queue)."""
        ready = []
        for queue in self.mma_queues.values():
            if queue:
                ready.append(lambda q=queue: self._finish_mma(q))
        if self.gathers:
            ready.append(self._land_gather)
        return ready

    def _finish_mma(self, queue: deque) -> None:
        op, names = queue.popleft()
        for name in names:
            self.buffer(name).readers.discard(op)

    def _land_gather(self) -> None:
        piece, names, content = self.gathers.popleft()
        for name in names:
            buf = self.buffer(name)
            buf.writing, buf.content = False, content
        if piece is not None:
            self.arrive(f"full {piece}")


# Stage pieces in the producer's order, with the buffers each one fills.
PIECES = {"0L": ["main0 L"], "1T": ["tail1"], "1R": ["main1 R"], "0R": ["main0 R", "tail0"], "1L": ["main1 L"]}


EVEN_PIECES = ("0L", "0R")  # what a half pair gathers


def pairs_of(blocks: int) -> tuple[int, bool]:
    """(block pairs, whether the last one is a half pair) of a group of `blocks` KV blocks."""
    return -(-blocks // 2), blocks % 2 == 1


def producer(m: Machine, options: PipelineOptions, blocks: int) -> Partition:
    yield ("do", lambda: m.issue_gather(None, ["q"], ("q",), "producer copies Q"))
    pairs, half = pairs_of(blocks)
    for p in range(pairs):
        last_half = half and p == pairs - 1
        for piece, names in PIECES.items():
            if last_half and piece not in EVEN_PIECES:
                continue
            if p:
                yield ("wait", lambda piece=piece, k=p - 1: m.phase_done(f"empty {piece}", k), f"empty {piece}")
            yield ("do", lambda piece=piece, n=names, k=p: m.issue_gather(piece, n, kv(k), "producer"))


def kv(pair: int) -> tuple:
    """What a gather of `pair`'s blocks leaves in a stage buffer."""
    return ("kv", pair)


def wait_group(m: Machine, warpgroup: str, outstanding: int) -> Step:
    return ("wait", lambda: len(m.mma_queues[warpgroup]) <= outstanding, f"{warpgroup} wait_group {outstanding}")


def wait_phase(m: Machine, barrier: str, pair: int) -> Step:
    return ("wait", lambda: m.phase_done(barrier, pair), barrier)


def write_out(m: Machine, options: PipelineOptions, me: int) -> Partition:
    """The row-sum exchange at the end of a non-empty group, then the staged write-out: each warpgroup writes its
    normalised O half into a stage buffer (the even one main0 L, the odd one main0 R) and reads it back."""
    peer = 1 - me
    stage = "main0 L" if me == 0 else options.odd_stages_out_into
    stage_o = ("do", lambda: m.write(stage, ("O", me), f"consumer {me} stages O"))
    if options.stage_out_before_sums:
        yield stage_o
    yield ("do", lambda: (m.write(f"sum{me}", ("sum",), f"consumer {me} row sums"), m.arrive(f"sums{me}")))
    yield wait_phase(m, f"sums{peer}", 0)
    yield ("do", lambda: m.read(f"sum{peer}", ("sum",), f"consumer {me} reads the peer's row sums"))
    if not options.stage_out_before_sums:
        yield stage_o
    yield ("do", lambda: m.read(stage, ("O", me), f"consumer {me} reads its staged O"))


def even_left_scores(m: Machine, p: int, waited: bool = True) -> Partition:
    """The even warpgroup's S0 left half of pair p, once 0L has landed (`waited`)."""
    if waited:
        yield wait_phase(m, "full 0L", p)
    yield ("do", lambda: m.issue_mma("even", {"main0 L": kv(p), "q": ("q",)}, "even S0 left"))


def even_block(m: Machine, p: int) -> Partition:
    """The even warpgroup's own block of pair p, as full and half pairs share it: S0 (its left half
    issued in the previous pair; the first pair's here, waited for), M0 published, O += P0 V0 issued."""
    if p == 0:
        yield from even_left_scores(m, p)
        yield wait_group(m, "even", 0)
    yield wait_phase(m, "full 0R", p)
    yield ("do", lambda: m.issue_mma("even", {"main0 R": kv(p), "q": ("q",)}, "even S0 right"))
    yield ("do", lambda: m.issue_mma("even", {"tail0": kv(p), "q": ("q",)}, "even S0 tail"))
    yield wait_group(m, "even", 0)
    yield ("do", lambda: (m.write("max0", ("M0", p), "even publishes M0"), m.arrive("max0")))
    yield ("do", lambda: m.issue_mma("even", {"main0 L": kv(p)}, "even O += P0 V0"))


def even_half_pair(m: Machine, p: int) -> Partition:
    """The even warpgroup's half pair p (the group's last, its odd block absent): S0 (its left half
    issued before, as in a full pair), M0, O += P0 V0 from registers and P0 for the odd warpgroup's
    columns, against M0 (the pair's max: there is no odd block)."""
    yield from even_block(m, p)
    yield ("do", lambda: (m.write("tail0", ("P0", p), "even publishes P0"), m.arrive("pub0")))
    yield wait_group(m, "even", 0)


def odd_half_pair(m: Machine, options: PipelineOptions, p: int) -> Partition:
    """The odd warpgroup's half pair p: M0, then O += P0 V0 on its columns once P0 is there."""
    yield wait_phase(m, "max0", p)
    yield ("do", lambda: m.read("max0", ("M0", p), "odd reads M0"))
    if not options.half_p0_unwaited:
        yield wait_phase(m, "pub0", p)
    yield ("do", lambda: m.issue_mma("odd", {"tail0": ("P0", p), "main0 R": kv(p)}, "odd O += P0 V0"))
    yield wait_group(m, "odd", 0)


def even_pair(m: Machine, options: PipelineOptions, p: int, pairs: int) -> Partition:
    """Pair p of the even warpgroup (of `pairs`): S0's left half was issued in the previous pair
    (the first pair's before it, waited for), and each pair but the last issues the next one's
    behind its O += P1 V1. P0 stays in registers for its own O += P0 V0; it is stored (moved to
    the pair's max) only once the odd warpgroup's max has arrived."""
    yield from even_block(m, p)
    if not options.even_release_unwaited:
        yield wait_group(m, "even", 0)
    yield ("do", lambda: m.arrive("empty 0L"))
    yield wait_phase(m, "max1", p)
    yield ("do", lambda: m.read("max1", ("M1", p), "even reads M1"))
    yield ("do", lambda: (m.write("tail0", ("P0", p), "even publishes P0"), m.arrive("pub0")))
    yield wait_phase(m, "pub1", p)
    yield ("do", lambda: m.issue_mma("even", {"odd_p": ("P1", p), "main1 L": kv(p)}, "even O += P1 V1"))
    next_left = p + 1 < pairs
    if next_left:
        yield from even_left_scores(m, p + 1, waited=not options.next_left_unwaited)
    if not options.odd_block_release_unwaited:
        yield wait_group(m, "even", 1 if next_left else 0)
    yield ("do", lambda: m.arrive("empty 1L"))
    if next_left:
        yield wait_group(m, "even", 0)


def odd_pair(m: Machine, options: PipelineOptions, p: int, pairs: int) -> Partition:
    """Pair p of the odd warpgroup: all of S1, then the even warpgroup's max, its own P1, and the
    even warpgroup's P0 last."""
    if options.odd_p_early:
        yield ("do", lambda: m.write("odd_p", ("P1", p), "odd stores P1 early"))
    yield wait_phase(m, "full 1R", p)
    yield ("do", lambda: m.issue_mma("odd", {"main1 R": kv(p), "q": ("q",)}, "odd S1 right"))
    yield wait_phase(m, "full 1T", p)
    yield ("do", lambda: m.issue_mma("odd", {"tail1": kv(p), "q": ("q",)}, "odd S1 tail"))
    yield wait_phase(m, "full 1L", p)
    yield ("do", lambda: m.issue_mma("odd", {"main1 L": kv(p), "q": ("q",)}, "odd S1 left"))
    yield wait_group(m, "odd", 0)
    yield ("do", lambda: m.arrive("empty 1T"))
    if not options.peer_max_unwaited:
        yield wait_phase(m, "max0", p)
    yield ("do", lambda: m.read("max0", ("M0", p), "odd reads M0"))
    yield ("do", lambda: (m.write("max1", ("M1", p), "odd publishes M1"), m.arrive("max1")))
    yield ("do", lambda: m.issue_mma("odd", {"main1 R": kv(p)}, "odd O += P1 V1"))
    if not options.odd_p_early:
        yield ("do", lambda: m.write("odd_p", ("P1", p), "odd stores P1"))
    yield wait_phase(m, "pub0", p)
    yield ("do", lambda: m.issue_mma("odd", {"tail0": ("P0", p), "main0 R": kv(p)}, "odd O += P0 V0"))
    yield ("do", lambda: m.arrive("pub1"))
    yield wait_group(m, "odd", 1)
    yield ("do", lambda: m.arrive("empty 1R"))
    yield wait_group(m, "odd", options.odd_release_outstanding - 1)
    yield ("do", lambda: m.arrive("empty 0R"))


def consumer(pair: Callable, half_pair: Callable, me: int) -> Callable:
    """A consumer partition: the group's pairs (the last a half pair for an odd block count), then
    its row-sum exchange and staged write-out (not modelled for an empty group: nothing but Q is gathered)."""
    def partition(m: Machine, options: PipelineOptions, blocks: int) -> Partition:
        pairs, half = pairs_of(blocks)
        for p in range(pairs):
            if half and p == pairs - 1:
                yield from half_pair(m, options, p)
            else:
                yield from pair(m, options, p, pairs)
        if pairs:
            yield from write_out(m, options, me)
    return partition


even_consumer = consumer(even_pair, lambda m, options, p: even_half_pair(m, p), 0)
odd_consumer = consumer(odd_pair, odd_half_pair, 1)


def run_schedule(options: PipelineOptions, blocks: int, seed: int) -> int:
    """One random interleaving of a union group of `blocks` KV blocks; the number of steps it took.
    Raises ProtocolViolation on a race and on a deadlock."""
    rng = random.Random(seed)
    m = Machine()
    partitions = {name: make(m, options, blocks) for name, make in
                  (("producer", producer), ("even", even_consumer), ("odd", odd_consumer))}
    # A partition with nothing to do (a consumer of an empty group) starts finished.
    current = {name: step for name, gen in partitions.items() if (step := next(gen, None)) is not None}
    steps = 0
    while current or m.completions():
        movable = [name for name, step in current.items() if step[0] == "do" or step[1]()]
        choices = [("partition", name) for name in movable] + [("async", done) for done in m.completions()]
        if not choices:
            raise ProtocolViolation(f"deadlock: blocked on {[step[2] for step in current.values()]}")
        kind, chosen = rng.choice(choices)
        steps += 1
        if kind == "async":
            chosen()
            continue
        step = current[chosen]
        if step[0] == "do":
            step[1]()
        try:
            current[chosen] = next(partitions[chosen])
        except StopIteration:
            del current[chosen]
    return steps
