"""Word pools the code and problem styles draw from: synonyms for the identifiers the kernel templates use, naming
conventions, and the phrases comments and docstrings are written from. Everything here is written for this project;
the pools are realistic spellings of the same things (what different authors call a row index or a block sum), so a
learner sees many surface forms of one program."""

from __future__ import annotations

import random
import re

# Canonical identifier of the kernel templates -> snake_case synonyms (the first is the canonical name itself).
# A renamed source uses one synonym per identifier, spelled in the pair's naming convention.
IDENTIFIERS: dict[str, list[str]] = {
    "x": ["x", "input", "inp", "src", "xs", "in_data", "source", "values"],
    "y": ["y", "ys", "y_data", "y_buf", "yv"],  # a second input in some templates, the output in others
    "out": ["out", "output", "result", "res_out", "dst", "target"],
    "n": ["n", "numel", "count", "total", "num_elements", "size", "length"],
    "i": ["i", "idx", "e", "pos", "index", "gid", "linear"],
    "stride": ["stride", "step", "grid_stride", "jump", "increment", "grid_step"],
    "first": ["first", "start", "begin", "tid", "global_id", "thread_id"],
    "acc": ["acc", "accum", "total", "running", "partial_sum", "agg", "local_acc"],
    "row": ["row", "row_idx", "r", "row_id", "line", "row_index"],
    "rows": ["rows", "num_rows", "n_rows", "outer_size", "row_count", "nrows"],
    "base": ["base", "offset", "row_offset", "row_start", "off", "row_base"],
    "lane": ["lane", "lane_id", "ln", "lane_idx", "laneid"],
    "warp": ["warp", "warp_id", "wid", "warp_idx", "warpid"],
    "warps": ["warps", "num_warps", "n_warps", "warp_count", "nwarps"],
    "vectorized": ["vectorized", "use_vec", "aligned", "vec_ok", "can_vectorize", "fast_path", "is_aligned"],
    "n_vec": ["n_vec", "num_vec", "packs", "vec_count", "num_packs", "n_packs"],
    "Pack": ["Pack", "Vec", "Chunk", "Packet", "Bundle", "VecT", "Lanes"],
    "VEC": ["VEC", "kVec", "VEC_SIZE", "PACK", "kPack", "LANES", "kWidth"],
    "apply_chain": ["apply_chain", "apply_ops", "epilogue", "fused_op", "transform", "pointwise", "apply_fn"],
    "combine": ["combine", "binary_op", "merge", "fuse2", "pair_op", "mix"],
    "warp_sum": ["warp_sum", "warp_reduce_sum", "warp_all_sum", "reduce_warp", "warp_total", "shfl_sum"],
    "warp_max": ["warp_max", "warp_reduce_max", "warp_all_max", "max_warp", "shfl_max"],
    "warp_min": ["warp_min", "warp_reduce_min", "warp_all_min", "min_warp", "shfl_min"],
    "block_sum": ["block_sum", "block_reduce_sum", "block_all_sum", "reduce_block", "block_total", "cta_sum"],
    "block_max": ["block_max", "block_reduce_max", "block_all_max", "max_block", "cta_max"],
    "block_min": ["block_min", "block_reduce_min", "block_all_min", "min_block", "cta_min"],
    "partial": ["partial", "warp_sums", "scratch", "smem", "buf", "shared_part", "staging"],
    "blocks": ["blocks", "grid", "num_blocks", "nblocks", "grid_size", "grid_dim"],
    "threads": ["threads", "block_size", "nthreads", "threads_per_block", "block_dim", "tpb"],
    "work": ["work", "items", "units", "jobs", "tasks", "work_items"],
    "weight": ["weight", "w", "gamma", "scale_w", "wt", "weights"],
    "bias": ["bias", "b", "beta", "shift_b", "bs", "offset_b"],
    "res": ["res", "residual", "skip", "shortcut", "identity", "resid"],
    "mean": ["mean", "mu", "avg", "row_mean", "m_val"],
    "rstd": ["rstd", "inv_std", "rsigma", "istd", "inv_sigma", "rs"],
    "inv": ["inv", "inv_sum", "recip", "norm_inv", "rinv", "scale_inv"],
    "eps": ["eps", "epsilon", "eps_val", "tiny"],
    "inner": ["inner", "inner_size", "cols", "last_dim", "width", "d_inner"],
    "outer": ["outer", "outer_size", "planes", "lead", "prefix"],
    "mask": ["mask", "keep", "pred", "flags", "mask_ptr"],
    "table": ["table", "weight_table", "emb", "lookup", "embeddings"],
    "idx": ["idx", "indices", "ids", "index_ptr", "keys", "positions"],
    "tile": ["tile", "smem_tile", "buf", "stage", "sh_tile", "shared_tile"],
    "vals": ["vals", "regs", "cache", "local", "frag", "held"],
    "best": ["best", "best_val", "top", "cur_best", "bv"],
    "best_i": ["best_i", "best_idx", "arg", "top_i", "bi"],
    "m_run": ["m_run", "running_max", "mx", "row_max", "cur_max"],
    "s_run": ["s_run", "running_sum", "denom", "row_sum", "cur_sum"],
    "scale": ["scale", "alpha", "factor", "mult", "coef"],
    "tmp": ["tmp", "scratch_buf", "inter", "mid", "stage_buf", "interm"],
    "count": ["count", "cnt", "n_seen", "k_count", "samples"],
    "delta": ["delta", "diff", "d", "dev", "dlt"],
    "m2": ["m2", "sq_dev", "var_acc", "m_two", "ssd"],
}

# Names that are tensors a host function receives: error-message strings mention them, so they are renamed inside
# string literals too (other names in strings are prose).
PARAM_NAMES = {"x", "y", "out", "res", "weight", "bias", "mask", "idx", "table"}

# Type aliases (the element type) take their own spellings per convention.
TYPE_ALIASES = {
    "snake": ["elem_t", "scalar_t", "data_t", "value_t", "io_t", "storage_t", "elem_type"],
    "camel": ["ElemT", "Scalar", "DataT", "Value", "IoT", "StorageT", "Elem"],
    "short": ["T", "E", "D", "V", "Ty"],
}
# Short-convention spellings: terse names people use in small kernels.
SHORT = {
    "x": ["x", "a", "p", "in"], "y": ["y", "o", "z", "q"], "out": ["o", "out", "z"], "n": ["n", "N", "cnt"],
    "i": ["i", "k", "e", "j"], "stride": ["s", "st", "step"], "first": ["t", "g", "i0"], "acc": ["s", "a", "t"],
    "row": ["r", "row"], "rows": ["R", "nr", "rows"], "base": ["off", "b0", "o0"], "lane": ["ln", "l", "li"],
    "warp": ["w", "wp", "wi"], "warps": ["nw", "W", "ws"], "vectorized": ["vec", "v4", "al"],
    "n_vec": ["nv", "np", "nk"], "Pack": ["P", "V", "Pk"], "VEC": ["V", "W", "VW"], "apply_chain": ["f", "op", "fn"],
    "combine": ["g", "op2", "mix"], "warp_sum": ["wsum", "wred"], "warp_max": ["wmax", "wmx"],
    "warp_min": ["wmin", "wmn"], "block_sum": ["bsum", "bred"], "block_max": ["bmax", "bmx"],
    "block_min": ["bmin", "bmn"], "partial": ["sh", "sm", "ps"], "blocks": ["g", "nb", "gs"],
    "threads": ["t", "nt", "bs"], "work": ["w", "wk"], "weight": ["w", "g"], "bias": ["b", "bb"],
    "res": ["r", "rs"], "mean": ["mu", "m"], "rstd": ["rs", "is"], "inv": ["r", "iv"], "eps": ["eps", "ep"],
    "inner": ["in_", "C", "L"], "outer": ["O", "P"], "mask": ["m", "mk"], "table": ["tb", "E"],
    "idx": ["ix", "I"], "tile": ["sh", "t"], "vals": ["rv", "c"], "best": ["bv", "b"], "best_i": ["bi", "j"],
    "m_run": ["mx", "m"], "s_run": ["sm", "l"], "scale": ["a", "sc"], "tmp": ["tm", "mid"],
    "count": ["c", "nc"], "delta": ["d", "dd"], "m2": ["q", "m2"],
}

CPP_RESERVED = {
    "alignas", "alignof", "and", "asm", "auto", "bool", "break", "case", "catch", "char", "class", "const",
    "constexpr", "continue", "default", "delete", "do", "double", "else", "enum", "explicit", "export", "extern",
    "false", "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace", "new", "not",
    "nullptr", "operator", "or", "private", "protected", "public", "register", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "template", "this", "throw", "true", "try", "typedef", "typename",
    "union", "unsigned", "using", "virtual", "void", "volatile", "while", "xor", "dim3", "min", "max", "std", "at",
    "torch", "c10", "size_t", "half", "half2", "float2", "float4", "int4", "uint4", "assert", "printf", "signbit",
}


def camel(snake: str) -> str:
    """lower camelCase of a snake_case name (`row_max` -> `rowMax`); names already in caps stay as they are."""
    if snake.isupper() or "_" not in snake.strip("_"):
        return snake
    head, *rest = [p for p in snake.split("_") if p]
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def pascal(snake: str) -> str:
    c = camel(snake)
    return c[:1].upper() + c[1:]


def spell(snake: str, convention: str) -> str:
    return camel(snake) if convention == "camel" else snake


def words_of(name: str) -> list[str]:
    """The words of an identifier in any convention (`fusedGeluTanh` and `fused_gelu_tanh` -> fused, gelu, tanh)."""
    return [w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", name)]


# ---------------------------------------------------------------- comment phrases (CUDA side)

# Short descriptions of what a kernel strategy does, several phrasings each; {op} is the operation's description.
STRATEGY_NOTES: dict[str, list[str]] = {
    "grid_stride": [
        "Grid-stride loop: each thread walks the tensor in steps of the whole grid, so a capped grid covers any size.",
        "Every thread handles elements tid, tid + gridDim.x * blockDim.x, ... until the end of the buffer.",
        "A fixed-size grid loops over the data; the loop stride is the total thread count.",
        "Threads stride through memory by the grid size, which keeps reads coalesced for any n.",
    ],
    "thread_per_element": [
        "One thread per element; the grid is sized to cover n exactly and the tail threads exit early.",
        "Simple mapping: global thread index == element index, guarded by a bounds check.",
        "Each thread computes exactly one output; enough blocks are launched to cover the whole tensor.",
    ],
    "unrolled_ilp": [
        "Each thread processes several elements spaced one block apart, so independent loads are in flight at once.",
        "Manual unrolling by a small factor gives every thread more independent work (instruction-level parallelism).",
        "A block covers blockDim.x * UNROLL consecutive elements; lanes stay coalesced within every unrolled step.",
    ],
    "vectorized": [
        "Vectorised path: 16-byte packs per load and store, then a scalar loop for the elements left over.",
        "Reads and writes go through 128-bit packs when the pointers are aligned; the ragged tail is done one by one.",
        "Wide loads (16 bytes per thread per step) cut the number of memory transactions; a scalar tail finishes.",
    ],
    "half2": [
        "Pairs of 16-bit values are loaded as one 32-bit word, converted to float2, processed, and packed back.",
        "Two-wide half-precision vectors halve the number of memory instructions; an odd last element is handled alone.",
        "Packed 2 x 16-bit loads; the math itself runs in float for accuracy.",
    ],
    "multi_kernel": [
        "Two kernels: the first writes an intermediate in float, the second finishes the computation from it.",
        "Split into separate passes (kept simple to read); the intermediate stays in fp32 between them.",
    ],
    "warp_shuffle": [
        "Reductions use warp shuffles first, then one value per warp through shared memory.",
        "Butterfly __shfl_xor_sync reductions inside each warp, then the warp totals are combined by warp 0.",
        "Warp-level shuffles do most of the reduction without touching shared memory.",
    ],
    "smem_tree": [
        "Classic shared-memory tree reduction: halve the active threads each step until one value is left.",
        "Block reduction through a shared buffer, pairwise sums with a barrier between steps.",
        "Each step folds the upper half of the shared array onto the lower half.",
    ],
    "cub": [
        "cub::BlockReduce does the block-wide reductions (its temp storage lives in shared memory).",
        "Block-wide reductions come from CUB, which picks a warp-shuffle based algorithm.",
        "Uses CUB's collective primitives instead of a hand-written reduction.",
    ],
    "warp_per_row": [
        "One warp per row: short rows do not need a whole block, and no __syncthreads is needed.",
        "Rows are assigned to warps; several rows share a block, and lanes stride each row.",
        "Each warp owns a row and reduces it with shuffles only.",
    ],
    "block_per_row": [
        "One block per row; threads stride the row and combine their partial results with a block reduction.",
        "A thread block handles one row at a time, so every row is read with coalesced accesses.",
    ],
    "online_softmax": [
        "Online softmax: the running max and the running sum are updated together in one pass over the row.",
        "Single-pass statistics: when a larger value appears, the partial sum is rescaled by exp(old_max - new_max).",
    ],
    "welford": [
        "Welford's algorithm gives the mean and variance in one numerically stable pass; partial results are merged.",
        "Mean and M2 are accumulated with Welford updates and combined across threads with the parallel formula.",
    ],
    "smem_row_cache": [
        "The row is staged in shared memory once, so the later passes do not read global memory again.",
        "Shared memory caches the whole row; statistics and the final write both read it from there.",
    ],
    "register_tiled_gemm": [
        "Tiled GEMM: tiles of A and B are staged in shared memory and each thread keeps a small register tile.",
        "Shared-memory blocking with a per-thread micro-tile of accumulators.",
    ],
    "smem_tiled_gemm": [
        "Square shared-memory tiles of A and B; every thread computes one output element.",
        "Textbook tiled matrix multiply: load a tile of each operand, sync, accumulate, repeat along K.",
    ],
    "wmma": [
        "Tensor cores through the WMMA API: 16x16x16 half-precision fragments accumulate in fp32.",
        "Each warp computes a 32x32 output tile from wmma fragments; operands are staged in shared memory.",
        "Matrix fragments run on the tensor cores; the fp32 accumulators go through shared memory for the epilogue.",
    ],
    "split_epilogue": [
        "The GEMM and its epilogue are separate kernels: the first writes the raw product, the second applies the ops.",
        "Two launches: matrix multiply, then a pointwise kernel over the product.",
    ],
    "tiled_transpose": [
        "Transpose through a shared tile with one padding column, so both the reads and the writes are coalesced.",
    ],
    "gather_map": [
        "Each output element computes the input position it reads from; the reads may be scattered, the writes are not.",
        "Index arithmetic maps every output coordinate back to its source; one thread per output element.",
    ],
    "direct_conv": [
        "Direct convolution with the filter weights of a few output channels kept in shared memory.",
    ],
    "block_scan": [
        "Block scan: per-thread serial scans of contiguous chunks, a warp-shuffle scan of the chunk totals, then a fix-up.",
    ],
    "cub_scan": [
        "cub::BlockScan over the row, in tiles of blockDim.x elements with a carry between tiles.",
    ],
    "two_stage": [
        "Two-stage reduction: per-block partial sums, then one block adds the partials in a fixed order (deterministic).",
        "No atomics: the first kernel writes one partial per block and a second kernel sums them in order.",
    ],
    "flash_attention": [
        "Flash-style attention: K/V tiles in shared memory and an online softmax per query row.",
    ],
    "thread_per_output": [
        "One thread per output element; each thread loops over its window or its reduced dimension.",
    ],
}

DTYPE_NOTES = {
    "fp32": ["All math in fp32.", "Inputs and outputs are float32.", "fp32 in, fp32 out."],
    "fp16": ["Loads fp16, computes in fp32, rounds once when storing.", "Half-precision storage, float math.",
             "fp16 values are widened to float for the arithmetic."],
    "bf16": ["bfloat16 storage with fp32 arithmetic.", "Values are converted bf16 -> float -> bf16.",
             "Computes in float and rounds to bfloat16 on the store."],
    "int": ["Integer math, exact.", "Works on integer data directly; no rounding involved."],
}

HEADER_OPENERS = ["{Op}.", "Kernel for {op}.", "CUDA implementation of {op}.", "Fused kernel: {op}.",
                  "Computes {op}.", "{Op} in a single pass.", "Hand-written CUDA for {op}.",
                  "This extension computes {op}.", "{Op} (custom CUDA kernel)."]

LAUNCH_ERROR_MESSAGES = ["kernel launch failed", "CUDA kernel launch error", "launch failed", "kernel failed to launch",
                         "CUDA error after launch"]

CHECK_MESSAGES = {
    "cuda": ["must be a CUDA tensor", "must live on the GPU", "should be on a CUDA device", "has to be a CUDA tensor",
             "is not on the GPU"],
    "contiguous": ["must be contiguous", "must be a contiguous tensor", "should be contiguous", "needs contiguous memory"],
    "dtype": ["must be {dtype}", "has the wrong dtype (expected {dtype})", "must have dtype {dtype}",
              "expected {dtype} data"],
}

MODELNEW_DOCS = [
    "Same computation as Model, done by a custom CUDA kernel.",
    "Drop-in replacement for Model backed by a hand-written kernel.",
    "Model with its forward pass replaced by a fused CUDA extension.",
    "CUDA version of Model.",
    "Runs {op} with one custom kernel launch instead of several PyTorch ops.",
    "Optimised Model: {op} fused into a CUDA kernel.",
    "Faster Model: {op} implemented in CUDA.",
]

PY_BUILD_COMMENTS = [
    "# Build the CUDA extension when this module is imported.",
    "# JIT-compile the kernel with torch's cpp_extension.",
    "# Compile once at import time; later imports hit torch's extension cache.",
    "# The extension exposes the host function declared in the C++ source below.",
    "# load_inline writes the sources to a temp dir and builds them with nvcc.",
]


def header_comment(rng: random.Random, op: str, strategy: str, dtype: str, style: str) -> str:
    """A comment block describing a kernel (op, strategy, dtype), in one of the block comment styles."""
    opener = rng.choice(HEADER_OPENERS).format(op=op, Op=op[:1].upper() + op[1:])
    lines = [opener]
    if strategy in STRATEGY_NOTES:
        lines.append(rng.choice(STRATEGY_NOTES[strategy]))
    notes = DTYPE_NOTES.get(dtype) or DTYPE_NOTES["int"]
    if rng.random() < 0.6:
        lines.append(rng.choice(notes))
    if style == "block":
        return "/*\n" + "\n".join(" * " + line for line in lines) + "\n */\n"
    if style == "doxygen":
        return "/**\n * @brief " + lines[0] + "\n" + "".join(f" * {line}\n" for line in lines[1:]) + " */\n"
    return "".join(f"// {line}\n" for line in lines)


# ---------------------------------------------------------------- problem-side phrases (PyTorch modules)

# Where a module is used, in one sentence; the keys are filled from the file's setting (scenarios.py): {ctx} a model
# and its field, {comp} the part of the model, {kind} the model, {domain} the field, {data} a data set.
PURPOSES = [
    "Used as a building block in {ctx}.", "Part of {ctx}.", "Taken from {ctx}.", "Extracted from {ctx}.",
    "Appears in {ctx}.", "A hot spot in {ctx}.", "Profiling showed this in {ctx}.",
    "This runs once per step in {ctx}.", "Written for {ctx}.", "Isolated from {ctx} for benchmarking.",
]

DOC_OPENERS = ["{Desc}", "Module that computes {desc}", "Computes {desc}", "Applies {desc}", "{Desc} (reference)",
               "Reference implementation: {desc}", "Simple module: {desc}", "Small model performing {desc}",
               "PyTorch reference for {desc}", "Wraps {desc}"]

ARG_DESCRIPTIONS = {
    "x": ["input tensor", "the activations", "input features", "tensor to transform", "the input batch"],
    "default": ["input tensor", "second operand", "auxiliary input", "another tensor of the same batch"],
}

RETURNS_DESCRIPTIONS = ["the transformed tensor", "output of the same batch size", "the result",
                        "tensor with the op applied", "the output tensor"]

HEADER_COMMENTS = [
    "# Repro: {comp} from our {kind} ({domain}).", "# Benchmark module (extracted from the {comp}).",
    "# Stand-alone copy of the {comp} so it can be profiled.", "# Minimal module reproducing a slow {comp}.",
    "# {Domain}: {comp} of the {kind}.", "# Part of the {data} training recipe.", "# Hot loop of the {comp}; see profile.",
    "# Isolated for kernel work: {comp} of a {kind}.", "# TODO: fuse this into a single kernel.",
    "# Sizes below match our {data} runs.",
]
MAIN_GUARDS = [
    ["if __name__ == \"__main__\":", "    model = Model(*get_init_inputs())", "    out = model(*get_inputs())",
     "    print(out.shape)"],
    ["if __name__ == \"__main__\":", "    m = Model(*get_init_inputs()).eval()", "    with torch.no_grad():",
     "        y = m(*get_inputs())", "    print(y.dtype, tuple(y.shape))"],
    ["if __name__ == \"__main__\":  # quick smoke test", "    print(Model(*get_init_inputs())(*get_inputs()).shape)"],
    ["if __name__ == \"__main__\":", "    # sanity check on CPU", "    model = Model(*get_init_inputs())",
     "    print(model)", "    print(model(*get_inputs()).dtype)"],
    ["if __name__ == \"__main__\":", "    inputs = get_inputs()", "    model = Model(*get_init_inputs())",
     "    print([tuple(t.shape) for t in inputs])", "    print(model(*inputs).shape)"],
]

COMMENT_LINES = [
    "# shapes used for benchmarking", "# sizes", "# problem size", "# benchmark configuration",
    "# input dimensions", "# configuration", "# feel free to change these", "# typical sizes from training",
    "# dimensions of the test inputs", "# workload", "# sizes from the training config", "# benchmark shapes",
    "# these match the profiled run", "# change with care: the kernels were tuned for these",
]

# Names people give the tensors a forward() receives, by role.
INPUT_NAMES = {
    "x": ["x", "inputs", "hidden", "features", "activations", "h", "tensor", "data", "feats", "z", "inp", "act",
          "signal", "values", "embeddings", "hidden_states", "x_in", "batch", "tokens", "patches", "frames", "latents",
          "pixel_values", "feature_map", "fmap", "node_feats", "point_feats", "spectrogram", "mel", "waveform",
          "logits_in", "emb", "encoder_out", "decoder_in", "residual_stream", "pre_act", "scores_in", "src",
          "input_tensor", "image", "images", "audio", "sequence", "series", "grid", "volume", "voxels", "states"],
    "y": ["y", "other", "gate", "bias_term", "second", "rhs", "weights_in", "aux", "scale_in", "modulation",
          "context", "cond", "side_input", "skip_feats", "mix", "ref", "target_feats", "guide", "other_branch"],
    "a": ["a", "lhs", "mat_a", "left", "A", "m1", "first"],
    "b": ["b", "rhs", "mat_b", "right", "B", "m2", "second_mat"],
    "residual": ["residual", "skip", "shortcut", "identity", "prev", "res", "block_input", "skip_connection",
                 "carry", "stream"],
    "mask": ["mask", "keep_mask", "pad_mask", "valid", "attn_mask", "m"],
    "idx": ["idx", "indices", "ids", "token_ids", "positions", "index", "labels_idx", "input_ids", "item_ids",
            "user_ids", "node_ids", "word_ids", "lookup_idx", "rows_idx"],
    "predictions": ["predictions", "pred", "preds", "outputs", "y_hat", "scores", "logits_pred", "forecast",
                    "estimate", "model_out", "recon", "reconstruction", "prob_logits"],
    "targets": ["targets", "target", "labels", "y_true", "gt", "truth", "ground_truth", "reference", "observed",
                "expected", "goal"],
    "logits": ["logits", "scores", "class_scores", "output_logits", "z"],
    "q": ["q", "query", "queries", "q_states"], "k": ["k", "key", "keys", "k_states"],
    "v": ["v", "value", "values_in", "v_states"],
    "scores": ["scores", "attn_scores", "logits", "att", "weights_raw"],
    "anchor": ["anchor", "anc", "emb_anchor"], "positive": ["positive", "pos", "emb_pos"],
    "negative": ["negative", "neg", "emb_neg"],
}

# Names people give the result of a forward step, by a keyword of the step (the first key found wins).
STEP_NAMES = {
    "log_softmax": ["log_probs", "logp"], "softmax": ["probs", "weights", "attn", "p"],
    "layer_norm": ["normed", "x_norm", "ln_out"], "rsqrt": ["normed", "x_normed"], "norm": ["normed", "unit"],
    "linear": ["proj", "projected", "lin_out"], "matmul": ["prod", "scores", "mm_out"], "@": ["prod", "projected"],
    "conv": ["conv_out", "filtered", "fmap"], "pool": ["pooled", "down"], "interpolate": ["upsampled", "resized"],
    "gelu": ["activated", "act", "gelu_out"], "relu": ["activated", "rectified", "act"], "silu": ["activated", "swished"],
    "logsigmoid": ["log_sig"], "sigmoid": ["gate", "gated", "squashed"], "tanh": ["squashed", "bounded"],
    "clamp": ["clipped", "bounded"], "bias": ["shifted", "biased"], "cumsum": ["running", "prefix"],
    "mean": ["pooled", "avg", "reduced"], "sum": ["total", "summed", "reduced"], "amax": ["peak", "row_max"],
    "exp(": ["expd", "exps"], "log(": ["logs", "log_x"], "transpose": ["transposed", "swapped"],
    "permute": ["permuted", "reordered"], "view": ["reshaped", "viewed"], "reshape": ["reshaped", "flat"],
    "round": ["rounded", "quantised"], "where": ["selected", "picked"], "masked_fill": ["masked", "filled"],
    "pad": ["padded"], "flip": ["flipped"], "roll": ["rolled", "shifted"], "* ": ["scaled"], "+ ": ["summed", "shifted"],
}
# Comments people put on a constructor line, by a keyword of the line.
INIT_COMMENTS = {
    "nn.Parameter": ["# learned", "# trainable", "# learnable parameter", "# initialised randomly, trained later"],
    "register_buffer": ["# not trained, but saved with the state dict", "# buffer: moves with .to(device)",
                        "# not a parameter"],
    "nn.Linear": ["# dense projection", "# fully connected layer"], "nn.Conv": ["# learned filters"],
    "nn.Embedding": ["# lookup table"], "eps": ["# numerical stability", "# avoids division by zero"],
}
# Comments on the return of get_init_inputs(): no constructor arguments (empty) or some (args).
INIT_INPUTS_COMMENTS = {
    "empty": ["# no constructor arguments", "# the defaults are fine", "# Model() takes no arguments",
              "# nothing to configure", "# uses the constructor defaults"],
    "args": ["# constructor arguments", "# same sizes as the inputs", "# passed to Model(...)", "# the layer config",
             "# must match get_inputs()"],
}
# Letters (or short words) people write a size constant as in a shape comment ("# x: (B, T, D)").
SHAPE_LETTERS = {
    "batch_size": ["B", "N", "batch", "bsz"], "seq_len": ["T", "L", "S", "seq"], "length": ["L", "T"],
    "num_tokens": ["N", "T", "tokens"], "dim": ["D", "C", "d", "dim"], "hidden_dim": ["H", "D_ff", "hidden"],
    "channels": ["C", "ch"], "in_channels": ["C_in", "C"], "out_channels": ["C_out"], "height": ["H", "h"],
    "width": ["W", "w"], "num_heads": ["H", "heads", "nh"], "head_dim": ["D", "Dh", "hd"],
    "in_features": ["D_in", "K", "in"], "out_features": ["D_out", "N", "out"], "rows": ["R", "M"],
    "cols": ["C", "N"], "num_classes": ["C", "K", "classes"], "vocab_size": ["V"],
}
# Trailing comments of size constants, by the constant's canonical name.
SIZE_COMMENTS = {
    "in_features": ["# input width", "# fan-in of the layer"], "out_features": ["# output width", "# units out"],
    "channels": ["# feature channels"], "in_channels": ["# channels in"], "out_channels": ["# channels out"],
    "num_heads": ["# attention heads"], "head_dim": ["# width of one head"], "kernel_size": ["# filter size"],
    "height": ["# feature map height"], "width": ["# feature map width"], "hidden_dim": ["# feed-forward width"],
    "vocab_size": ["# rows in the table"], "num_classes": ["# output classes"], "groups": ["# channel groups"],
}

CONSTANT_SPELLINGS = {  # size constant -> alternative names (lower, UPPER and short forms come from these)
    "batch_size": ["batch_size", "batch", "bs", "n_batch", "num_samples"],
    "dim": ["dim", "hidden", "features", "d_model", "width", "hidden_size", "n_features"],
    "seq_len": ["seq_len", "seq", "length", "tokens", "seq_length", "n_tokens"],
    "channels": ["channels", "num_channels", "c", "n_channels", "chans"],
    "height": ["height", "h", "img_h", "rows_px"], "width": ["width", "w", "img_w", "cols_px"],
    "length": ["length", "seq_len", "n_steps", "time_steps", "signal_len"],
    "in_features": ["in_features", "d_in", "input_dim", "in_dim", "fan_in"],
    "out_features": ["out_features", "d_out", "output_dim", "out_dim", "fan_out"],
    "num_heads": ["num_heads", "heads", "n_heads", "n_head"], "head_dim": ["head_dim", "d_head", "head_size"],
    "num_classes": ["num_classes", "classes", "n_classes", "vocab", "n_labels"],
    "vocab_size": ["vocab_size", "vocab", "num_embeddings", "n_vocab"],
    "hidden_dim": ["hidden_dim", "ffn_dim", "intermediate_size", "d_ff", "mlp_dim"],
    "in_channels": ["in_channels", "c_in", "in_ch", "cin"], "out_channels": ["out_channels", "c_out", "out_ch", "cout"],
    "kernel_size": ["kernel_size", "k", "ksize", "kernel"],
    "num_tokens": ["num_tokens", "tokens", "n_tokens", "seq_tokens"],
    "rows": ["rows", "n_rows", "m"], "cols": ["cols", "n_cols", "n"],
}

PURPOSES += [
    "Used in the {comp} of a {kind} for {domain}.", "This is the {comp} of our {kind} for {domain}.",
    "Trained on {data}; this block dominates the step time.", "From a {kind} trained on {data}.",
    "Lifted from the {comp} of a {kind} ({domain}) so it can be profiled alone.",
    "Our {domain} pipeline calls this inside the {comp}.", "A {comp} we use for {domain} ({data} experiments).",
    "Shows up in the {comp} of most {kind} variants we train on {data}.",
    "Kept small on purpose: it is the {comp} of a {kind} for {domain}.",
    "Benchmark copy of the {comp} from a {kind} fine-tuned on {data}.",
]

# Papers authors cite for an op, by operator family (author, year): a "Reference" line in the docstring.
REFERENCES = {
    "gelu": ["Hendrycks and Gimpel, 2016"], "silu": ["Ramachandran et al., 2017", "Elfwing et al., 2018"],
    "mish": ["Misra, 2019"], "selu": ["Klambauer et al., 2017"], "elu": ["Clevert et al., 2015"],
    "celu": ["Barron, 2017"], "hardswish": ["Howard et al., 2019"], "hardsigmoid": ["Howard et al., 2019"],
    "prelu": ["He et al., 2015"], "layer_norm": ["Ba et al., 2016"], "rms_norm": ["Zhang and Sennrich, 2019"],
    "llm_rmsnorm": ["Zhang and Sennrich, 2019"], "group_norm": ["Wu and He, 2018"], "instance_norm": ["Ulyanov et al., 2016"],
    "batch_norm": ["Ioffe and Szegedy, 2015"], "glu": ["Dauphin et al., 2017"], "geglu": ["Shazeer, 2020"],
    "swiglu_gate": ["Shazeer, 2020"], "swiglu": ["Shazeer, 2020"], "reglu": ["Shazeer, 2020"],
    "focal_loss": ["Lin et al., 2017"], "dice_loss": ["Milletari et al., 2016"], "rotary_embedding": ["Su et al., 2021"],
    "attention": ["Vaswani et al., 2017", "Dao et al., 2022"], "pixel_shuffle": ["Shi et al., 2016"],
    "channel_shuffle": ["Zhang et al., 2018"], "adaptive_modulation": ["Peebles and Xie, 2023"],
    "film": ["Perez et al., 2018"], "layer_scale": ["Touvron et al., 2021"], "channel_gate": ["Hu et al., 2018"],
    "triplet_margin_loss": ["Schroff et al., 2015"], "cross_entropy": ["Szegedy et al., 2016"],
    "fake_quantize": ["Jacob et al., 2018"], "quantize_int8": ["Jacob et al., 2018"], "softshrink": ["Donoho, 1995"],
    "huber_loss": ["Huber, 1964"], "smooth_l1_loss": ["Girshick, 2015"], "cosine_embedding_loss": ["Hadsell et al., 2006"],
    "kl_div": ["Hinton et al., 2015"], "upsample_bilinear": ["Long et al., 2015"], "embedding": ["Mikolov et al., 2013"],
}

# Comments people put on a line of a forward pass, by what the line does (a keyword found in the line).
LINE_COMMENTS = {
    "softmax": ["# normalise over the last dim", "# probabilities", "# attention weights", "# softmax over classes",
                "# rows now sum to one", "# turn scores into a distribution", "# weights over the keys"],
    "layer_norm": ["# pre-norm", "# normalise each token", "# LayerNorm over features", "# per-token statistics",
                   "# zero mean, unit variance, then the affine part"],
    "rsqrt": ["# RMS statistics", "# 1 / rms", "# scale by the inverse root mean square", "# reciprocal square root"],
    "gelu": ["# GELU as in BERT", "# smooth ReLU", "# nonlinearity", "# Gaussian error linear unit",
             "# same activation as the pretrained checkpoint"],
    "relu": ["# nonlinearity", "# rectify", "# zero out negatives", "# keep the positive part"],
    "silu": ["# swish", "# SiLU gate", "# x * sigmoid(x)", "# smooth, non-monotonic activation"],
    "sigmoid": ["# squash to (0, 1)", "# gate", "# gate values in (0, 1)", "# logistic"],
    "tanh": ["# squash to (-1, 1)", "# bounded activation", "# saturating nonlinearity"],
    "clamp": ["# keep values in range", "# clip outliers", "# bound the activations", "# guard against blow-ups",
              "# clip to the calibrated range"],
    "bias": ["# add the learned bias", "# shift by the bias", "# per-feature offset", "# broadcast over the batch"],
    "residual": ["# residual connection", "# skip connection", "# add back the input branch",
                 "# identity path keeps gradients healthy"],
    "mean": ["# average", "# reduce", "# mean over the reduced dim", "# average pooling over positions"],
    "sum": ["# total", "# reduce by summing", "# collapse the reduced dim"],
    "linear": ["# projection", "# dense layer", "# project to the output size", "# x @ W^T",
               "# the expensive part"],
    "matmul": ["# batched product", "# matrix product", "# scores between every pair of positions"],
    "conv": ["# convolution", "# spatial filter", "# learned filter bank", "# local receptive field"],
    "pool": ["# downsample", "# pooling", "# lower resolution", "# coarser grid"],
    "view": ["# reshape", "# restore the layout", "# no copy, just a new view"],
    "reshape": ["# flatten", "# back to the original shape", "# merge the leading dims"],
    "permute": ["# reorder dims", "# new dimension order"],
    "transpose": ["# swap the two dims", "# transpose for the next matmul"],
    "cat": ["# join along features", "# concatenate the branches"],
    "round": ["# quantise", "# snap to the grid", "# ties round to even"],
    "where": ["# select per element", "# masked select", "# pick a branch per element"],
    "masked_fill": ["# hide padded positions", "# apply the mask", "# masked entries get a fixed value"],
    "exp": ["# exponentiate", "# back from the log domain"], "log": ["# log domain", "# work with log values"],
    "norm": ["# normalise", "# vector length"], "chunk": ["# split into value and gate", "# two halves"],
    "sqrt": ["# square root", "# magnitude"], "abs": ["# magnitude only"],
    "pow": ["# power", "# elementwise power"], "argmax": ["# index of the best entry", "# predicted class"],
    "cumsum": ["# running total", "# prefix sum along the row"], "gather": ["# pick entries by index"],
    "scatter": ["# write values at the given positions"], "embedding": ["# token lookup", "# one row per id"],
    "pad": ["# pad the borders"], "flip": ["# reverse the order"], "roll": ["# circular shift"],
    "interpolate": ["# upsample", "# resize the feature map"], "contiguous": ["# materialise the new layout"],
    "return": ["# done", "# output", "# hand the result back"],
}
ARG_DESCRIPTIONS.update({
    "x": ARG_DESCRIPTIONS["x"] + ["hidden states of shape (batch, ..., features)", "the feature map", "token activations",
                                  "a batch of feature vectors", "pre-activation values"],
    "y": ["the second operand", "gate values", "the tensor to combine with", "a broadcastable tensor"],
    "residual": ["the skip branch", "residual stream", "the block input to add back"],
    "mask": ["boolean mask (True = masked)", "padding mask", "which positions to drop"],
    "idx": ["integer indices", "token ids", "row indices into the table"],
    "predictions": ["model outputs", "predicted values", "raw scores"], "targets": ["ground truth", "labels", "targets"],
    "logits": ["unnormalised class scores", "raw logits"], "labels": ["class labels", "+1 / -1 labels"],
    "q": ["queries", "query projections"], "k": ["keys", "key projections"], "v": ["values", "value projections"],
})
CTOR_DESCRIPTIONS = {
    "dim": "size of the last (feature) dimension", "eps": "added to the variance for numerical stability",
    "in_features": "input feature size", "out_features": "output feature size", "channels": "number of channels",
    "groups": "number of groups", "num_heads": "number of attention heads", "head_dim": "size of each head",
    "kernel_size": "convolution window", "in_channels": "input channels", "out_channels": "output channels",
    "vocab_size": "number of rows in the embedding table", "seq_len": "maximum sequence length",
    "hidden_dim": "width of the hidden layer", "scale": "quantisation step", "smooth": "smoothing constant",
    "num_kv_heads": "number of key/value heads", "max_seq_len": "longest supported sequence", "base": "rotary base",
}
EXAMPLE_INTROS = ["Example:", "Example::", "Usage:", "Examples:"]

# Attribute names of parameters and buffers, with the names other authors give them (the state-dict keys follow).
ATTRIBUTES = {
    "weight": ["weight", "w", "kernel", "scale_param", "gain", "proj"], "bias": ["bias", "b", "offset", "shift_param"],
    "gamma": ["gamma", "ls_gamma", "layer_scale", "alpha"], "pos": ["pos", "pos_embed", "position_embeddings", "pe"],
    "eps": ["eps", "epsilon", "variance_epsilon"], "fc": ["fc", "proj", "linear", "dense", "lin"],
    "conv": ["conv", "conv1", "filter", "proj"], "embed": ["embed", "embedding", "tok_emb", "wte", "token_embedding"],
    "scale": ["scale", "qscale", "step", "delta"], "groups": ["groups", "num_groups", "g"],
    "w1": ["w1", "fc1_weight", "up_weight"], "b1": ["b1", "fc1_bias", "up_bias"], "w2": ["w2", "fc2_weight", "down_weight"],
    "b2": ["b2", "fc2_bias", "down_bias"], "w_gate": ["w_gate", "gate_proj", "w1"], "w_up": ["w_up", "up_proj", "w3"],
    "w_down": ["w_down", "down_proj", "w2"], "num_heads": ["num_heads", "n_heads", "heads"],
    "smooth": ["smooth", "smoothing", "eps"],
}

PURPOSES += [
    "We saw this {comp} eat most of the step time on {data}.", "Copied out of the {comp} to try a fused kernel.",
    "The {domain} team asked for a faster {comp}.", "In production this {comp} runs for every request.",
    "Same maths as the {comp} in our {kind}, without the surrounding model.",
    "Profiled on batches from {data}; the rest of the {kind} is omitted.",
]
