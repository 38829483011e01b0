"""Weights streamed into the GPU's L2 cache ahead of the matmuls that read them, for few-token decoding.

A batch-1 denoising pass reads every weight once, so its floor is weight bytes / memory bandwidth. But between the
matmuls sit kernels that read almost nothing (norms, rotary, attention over a short cache) and every kernel has its
launch ramp and tail, so memory idled for more than half of a forward (2.07 ms against a 0.82 ms floor on an H200).
Here, after each matmul, a small kernel on a side stream has the copy engines prefetch the next `lookahead` bytes of
the weight stream (the weights in the order the forward reads them) into L2 (60 MB on an H200), while the main stream
goes on with the latency-bound kernels; the matmuls then read from L2. The side stream joins the main one once, at
the end of the forward (`join_prefetches`). Side stream, because a bulk prefetch holds its kernel until the bytes
have arrived: in line, each point added its full transfer time to the forward (measured: 2.13 ms without points,
2.40 ms with 112 empty ones, 3.27 ms with 8 MiB prefetched at each).

The plan lives in fixed-size device tables (an address and a size per chunk), filled in place by
`PrefetchPlan.configure`, so a compiled and graph-captured forward takes a new lookahead or set of points without
recompiling or recapturing: the tables are read when the graph replays.
"""

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the points do nothing
    triton = None

# The matmuls of a layer, in the order they run; a prefetch point follows each.
MATMULS = ("qkv", "o_proj", "gate_up", "down_proj")
CHUNK_BYTES = 64 << 10  # bytes per bulk prefetch instruction (default)
MIN_CHUNK_BYTES = 16 << 10
MAX_LOOKAHEAD_BYTES = 64 << 20  # a table's capacity: more than an H200's L2 would be wasted
DEFAULT_LOOKAHEAD_BYTES = 32 << 20
CHUNKS_PER_PROGRAM = 32  # one chunk per thread of a one-warp program

if triton is not None:
    @triton.jit
    def _prefetch_kernel(table_ptr, CHUNKS: tl.constexpr):
        """Issues `cp.async.bulk.prefetch.L2` for table rows (address, bytes); rows with 0 bytes are skipped."""
        rows = tl.program_id(0) * CHUNKS + tl.arange(0, CHUNKS)
        address = tl.load(table_ptr + 2 * rows)
        size = tl.load(table_ptr + 2 * rows + 1).to(tl.int32)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
            "=r,l,r", [address, size], dtype=tl.int32, is_pure=False, pack=1)


_side_streams: dict[int, torch.cuda.Stream] = {}  # per device: where the prefetch kernels run
_forked: set[int] = set()  # devices whose side stream has work the main stream has not joined yet


@torch.library.custom_op("dice::prefetch_to_l2", mutates_args={"anchor"})
def prefetch_to_l2(anchor: torch.Tensor, table: torch.Tensor) -> None:
    """Prefetches the (address, bytes) rows of `table` (int64 [rows, 2]) into L2 from the side stream, forked
    from the current stream here; nothing on a CPU.

    `anchor` is the activation at the point, which the op declares it writes (and does not): the compiler drops
    an op without outputs as dead code and moves one without data dependencies to the top of its graph, while
    a write to the activation pins the op after the kernel that makes it and before those that read it. An opaque
    op, not a triton_op: the compiler must not look inside a kernel that reads only addresses, nor move the
    stream switches."""
    if not table.is_cuda or triton is None:
        return
    device = table.device.index
    side = _side_streams.setdefault(device, torch.cuda.Stream(table.device))
    side.wait_stream(torch.cuda.current_stream(table.device))
    with torch.cuda.stream(side):
        _prefetch_kernel[(table.shape[0] // CHUNKS_PER_PROGRAM,)](table, CHUNKS=CHUNKS_PER_PROGRAM, num_warps=1)
    _forked.add(device)


@torch.library.custom_op("dice::join_prefetches", mutates_args={"anchor"})
def join_prefetches(anchor: torch.Tensor) -> None:
    """Makes the current stream wait for the prefetches forked so far (a CUDA graph capture must end joined).
    `anchor`: the forward's output, pinning the join after its last kernel (see prefetch_to_l2)."""
    if anchor.is_cuda and anchor.device.index in _forked:
        torch.cuda.current_stream(anchor.device).wait_stream(_side_streams[anchor.device.index])
        _forked.discard(anchor.device.index)


def default_lookahead(device) -> int:
    """The lookahead an engine uses on `device`: 0 (no prefetch points) without CUDA and Triton, else
    DEFAULT_LOOKAHEAD_BYTES, at most half the GPU's L2 (prefetching more than L2 holds evicts what it fetched)."""
    device = torch.device(device)
    if device.type != "cuda" or triton is None:
        return 0
    return min(DEFAULT_LOOKAHEAD_BYTES, torch.cuda.get_device_properties(device).L2_cache_size // 2)


class PrefetchPlan:
    """A device table per prefetch point of the chunks to prefetch there (see the module doc).

    `stream` lists the weights in the order the forward reads them, each tagged (layer, matmul); the point after
    a matmul prefetches the stream from the next weight onwards, up to `lookahead` bytes past that weight's start,
    skipping what an earlier point already asked for."""

    def __init__(self, stream: list[tuple[int, str, torch.Tensor]]):
        self.stream = stream
        rows = -(-MAX_LOOKAHEAD_BYTES // MIN_CHUNK_BYTES) + len(MATMULS) + 1  # a partial chunk per weight it spans
        rows = -(-rows // CHUNKS_PER_PROGRAM) * CHUNKS_PER_PROGRAM
        self.tables = {(layer, name): torch.zeros((rows, 2), dtype=torch.int64, device=weight.device)
                       for layer, name, weight in stream[:-1]}
        self.lookahead = 0
        self.points: tuple[str, ...] = ()

    def configure(self, lookahead: int, points=MATMULS, chunk_bytes: int = CHUNK_BYTES) -> None:
        """Fills the tables in place (a captured graph replays the new plan): prefetch `lookahead` bytes ahead
        at the points after the matmuls named in `points`. lookahead 0: prefetch nothing."""
        if not 0 <= lookahead <= MAX_LOOKAHEAD_BYTES:
            raise ValueError(f"lookahead must be 0 to {MAX_LOOKAHEAD_BYTES} bytes (the tables' size), not {lookahead}")
        if chunk_bytes % 16 or chunk_bytes < MIN_CHUNK_BYTES:
            raise ValueError(f"chunk_bytes must be a multiple of 16 of at least {MIN_CHUNK_BYTES}")
        unknown = set(points) - set(MATMULS)
        if unknown:
            raise ValueError(f"unknown prefetch points {sorted(unknown)}; known: {MATMULS}")
        starts, position = [], 0  # each weight's offset in the stream
        for _, _, weight in self.stream:
            starts.append(position)
            position += weight.numel() * weight.element_size()
        covered = 0  # stream bytes already asked for
        for index, (layer, name, _) in enumerate(self.stream[:-1]):
            table = torch.zeros(self.tables[(layer, name)].shape, dtype=torch.int64)
            if name in points and lookahead > 0:
                begin, end = max(covered, starts[index + 1]), starts[index + 1] + lookahead
                rows = self._chunks(starts, begin, end, chunk_bytes)
                if rows:
                    table[: len(rows)] = torch.tensor(rows, dtype=torch.int64)
                covered = max(covered, end)
            self.tables[(layer, name)].copy_(table)
        self.lookahead, self.points = lookahead, tuple(points)

    def _chunks(self, starts: list[int], begin: int, end: int, chunk_bytes: int) -> list[tuple[int, int]]:
        """(address, bytes) chunks covering stream bytes [begin, end), each inside one weight."""
        rows = []
        for start, (_, _, weight) in zip(starts, self.stream):
            size = weight.numel() * weight.element_size()
            lo, hi = max(begin, start), min(end, start + size)
            for offset in range(lo - start, hi - start, chunk_bytes):
                rows.append((weight.data_ptr() + offset, min(chunk_bytes, hi - start - offset) // 16 * 16))
        return [row for row in rows if row[1] > 0]

    def after(self, layer: int, matmul: str, anchor: torch.Tensor) -> None:
        """The prefetch point after `matmul` of `layer`, whose output is `anchor` (see prefetch_to_l2)."""
        torch.ops.dice.prefetch_to_l2(anchor, self.tables[(layer, matmul)])

    @staticmethod
    def join(output: torch.Tensor) -> None:
        """At the end of the forward, after the kernel that makes `output` (see join_prefetches)."""
        torch.ops.dice.join_prefetches(output)
