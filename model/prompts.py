"""DICE's prompt templates (byte-exact), first-code-block extraction, and infill splicing of whole-file outputs.

The templates are the trained distribution: DICE saw exactly these bytes (odd indentation, the literal `\\n`
escapes that became newlines, the trailing blank line after `assistant`), so they are reproduced unchanged from
`training/RL/sample/sdar_rl_rollout_kernel.py` of https://github.com/deadlykitten4/DICE (docs/decoding.md#prompts).
"""

import re
from functools import lru_cache
from pathlib import Path

PROMPT_EXAMPLES_DIR = Path(__file__).parent / "prompt_examples"

# The line of the one-shot ModelNew where DICE's infilling example cuts the file: everything before it is the
# example prefix; the CUDA source string it opens is the middle; the line after that string starts the suffix.
_EXAMPLE_MIDDLE_START = "elementwise_add_source = "
_EXAMPLE_SUFFIX_START = "elementwise_add_cpp_source = ("


@lru_cache(maxsize=None)
def _read_example(name: str) -> str:
    """One of the one-shot files, with LF line endings whatever the checkout did (DICE read them in text mode)."""
    path = PROMPT_EXAMPLES_DIR / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise FileNotFoundError(
            f"DICE prompt example {path} is missing ({err.strerror}); reinstall dice-copilot or restore the file"
        ) from err


def example_model() -> str:
    """The one-shot reference `Model` (element-wise add)."""
    return _read_example("model_ex_add.py")


def example_model_new() -> str:
    """The one-shot `ModelNew` with its `load_inline` CUDA kernel."""
    return _read_example("model_new_ex_add.py")


def example_infill_parts() -> tuple[str, str, str]:
    """(prefix, middle, suffix) of the one-shot ModelNew, cut where DICE's infilling prompt cuts it."""
    text = example_model_new()
    middle_at = text.index(_EXAMPLE_MIDDLE_START)
    suffix_at = text.index(_EXAMPLE_SUFFIX_START)
    return text[:middle_at], text[middle_at:suffix_at], text[suffix_at:]


# --- end-to-end generation (RL stage 2 and KernelBench-style use) -----------------------------------------------

_E2E_STATEMENT = (
    "<|im_start|>user\nYou write custom CUDA kernels to replace the pytorch operators in the given architecture to "
    "get speedups. \n\n"
    "    You have complete freedom to choose the set of operators you want to replace. You may make the decision to "
    "replace some operators with custom CUDA kernels and leave others unchanged. You may replace multiple operators "
    "with custom implementations, consider operator fusion opportunities (combining multiple operators into a single "
    "kernel, for example, combining matmul+relu), or algorithmic changes (such as online softmax). You are only "
    "limited by your imagination.\n\n"
)

_E2E_INSTRUCTION = (
    "\nOptimize the architecture named Model with custom CUDA operators! Name your optimized output architecture "
    "ModelNew. Output the new code in codeblocks. Please generate real code, NOT pseudocode, make sure the code "
    "compiles and is fully functional. Just output the new model code, no other text, and NO testing code! "
    "<|im_end|>\n<|im_start|>assistant\n\n"
)


def end_to_end_prompt(pytorch_code: str) -> str:
    """DICE's end-to-end prompt for a PyTorch reference module: one-shot add example, then the task.

    Reproduces `prompt_generate_custom_cuda_from_prompt_template(ref_arch_src)` byte for byte, including the
    open assistant turn followed by one blank line.
    """
    example = (
        "\n        Here's an example to show you the syntax of inline embedding custom CUDA operators in torch: "
        "The example given architecture is: \n\n"
        "        ``` \n\n"
        f"        {example_model()}\n"
        "        ``` \n\n"
        "        The example new arch with custom CUDA kernels looks like this: \n"
        "        ```\n"
        f"        {example_model_new()}\n"
        "        ``` \n\n"
        "        "
    )
    task = f"\n    You are given the following architecture: \n\n    ```\n    {pytorch_code}\n    ```\n    "
    return _E2E_STATEMENT + example + task + _E2E_INSTRUCTION


# --- kernel infilling (RL stage 1, and the IDE's in-body completion) ---------------------------------------------

_INFILL_HEAD = (
    "<|im_start|>user\nYou write custom CUDA kernels to replace the pytorch operators in the given architecture to "
    "get speedups. \n\n"
    "You will be provided with a reference pytorch implementation, which serves as the ground truth for logical "
    "behavior, along with a partial CUDA kernel skeleton (prefix and suffix). \n\n"
    "Your objective is to generate the core missing C++ code of custom CUDA kernels within the skeleton to ensure "
    "the custom CUDA kernel is functionally equivalent to the pytorch reference. You must adhere strictly to the "
    "provided kernel configuration.\n\n"
    "Here's an example to show you the syntax for generating C++ code based on a given prefix and suffix: "
    "The example given architecture is: \n\n"
)

# DICE renders this part with Jinja2's default `keep_trailing_newline=False`, so the template's final newline is
# dropped: the prompt ends in "assistant\n" (one newline), unlike the end-to-end prompt.
_INFILL_INSTRUCTION = (
    "Generate the core C++ code of this custom CUDA kernel to make your optimized output architecture complete. "
    "Output the whole new architecture in codeblocks. Please generate real code, NOT pseudocode, make sure the code "
    "compiles and is fully functional. Just output the new model code, no other text, and NO testing code! "
    "<|im_end|>\n<|im_start|>assistant\n"
)


def infill_prompt(pytorch_code: str, prefix: str, suffix: str) -> str:
    """DICE's kernel-infilling prompt: the reference module plus the ModelNew skeleton around the missing code.

    Reproduces `Template(KERNEL_INFILLING_SYSTEM_PROMPT).render(pytorch_code=..., prefix=..., suffix=...)`
    byte for byte. The model answers with the whole file; `splice_infill` recovers the middle.
    """
    ex_prefix, _, ex_suffix = example_infill_parts()
    example = (
        f"```\n{example_model()}``` \n\n\n"
        f"The example give prefix is: \n\n``` \n\n{ex_prefix.rstrip(chr(10))}\n``` \n\n\n"
        f"The example give suffix is: \n\n``` \n\n{ex_suffix}``` \n\n"
        "The example new arch with custom CUDA kernels looks like this (combine your generated C++ code with given "
        f"prefix and suffix): \n\n```\n{example_model_new()}``` \n\n\n"
    )
    task = (
        f"You are given the following architecture: \n\n```\n{pytorch_code}\n``` \n\n"
        f"The corresponding CUDA kernel prefix: \n\n```\n{prefix}\n``` \n\n"
        f"The corresponding CUDA kernel suffix: \n\n```\n{suffix}\n``` \n\n"
    )
    return _INFILL_HEAD + example + task + _INFILL_INSTRUCTION


def answer_block(code: str) -> str:
    """A trained answer to either prompt: the whole file in one python code block (what `extract_first_code` and
    `splice_infill` read back)."""
    return f"```python\n{code.rstrip()}\n```"


# --- extraction ------------------------------------------------------------------------------------------------

CODE_LANGUAGE_TAGS = ("python", "cpp")
_FIRST_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)


def _normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _strip_language_tags(code: str, languages: tuple[str, ...]) -> str:
    # As DICE: each tag in turn, if the code starts with it, is cut and the rest stripped. Unlike DICE, a tag
    # glued to an identifier ("```\npython_path = ...") is left alone: that is code, not an info string.
    for tag in languages:
        if code.startswith(tag) and not code[len(tag) : len(tag) + 1].isidentifier():
            code = code[len(tag) :].strip()
    return code


def extract_first_code(
    text: str, languages: tuple[str, ...] = CODE_LANGUAGE_TAGS, allow_unterminated: bool = False
) -> str | None:
    """The first ``` fenced block of a model answer, stripped, with a leading `python`/`cpp` tag removed.

    DICE's `extract_first_code(output, ["python", "cpp"])` semantics, with three decisions of ours:
    - line endings are normalised to LF first (a CRLF answer gives the same code as an LF one);
    - no block gives None instead of DICE's placeholder sentence (which scores 0 there);
    - an opening fence without a closing one (an answer cut by the token limit) gives None, as in DICE,
      unless `allow_unterminated`, which returns what follows the opening fence (for streaming previews).
    """
    text = _normalize_newlines(text).strip()
    match = _FIRST_BLOCK.search(text)
    if match:
        body = match.group(1)
    elif allow_unterminated and "```" in text:
        body = text.split("```", 1)[1]
    else:
        return None
    return _strip_language_tags(body.strip(), languages)


# --- infill splicing -------------------------------------------------------------------------------------------

# Whitespace-free characters an inexact anchor must share with the code (about one line of C++).
MIN_ANCHOR_CHARS = 24


class _Squeezed:
    """Text with all whitespace removed, remembering where each kept character sits in the original."""

    def __init__(self, text: str):
        self.text = text
        self.positions = [i for i, ch in enumerate(text) if not ch.isspace()]
        self.chars = "".join(text[i] for i in self.positions)


def _occurrences(haystack: str, needle: str, start: int, end: int) -> list[int]:
    found, at = [], haystack.find(needle, start, end)
    while at != -1:
        found.append(at)
        at = haystack.find(needle, at + 1, end)
    return found


def _longest_found(needle_at, longest: int, shortest: int) -> tuple[int, list[int]] | None:
    """Binary search for the longest anchor length with hits: a shorter piece of an anchor is found wherever it is."""
    best = None
    low, high = shortest, longest
    while low <= high:
        length = (low + high) // 2
        hits = needle_at(length)
        if hits:
            best, low = (length, hits), length + 1
        else:
            high = length - 1
    return best


def _prefix_end(code: _Squeezed, prefix: _Squeezed) -> int | None:
    """Index in code.chars just after the user's prefix, tolerating whitespace and edits before its tail."""
    if code.chars.startswith(prefix.chars):
        return len(prefix.chars)
    # The model rewrote part of the prefix: anchor on the longest tail of it found in the code, at the
    # occurrence whose end is nearest to where the whole prefix would end.
    found = _longest_found(
        lambda n: _occurrences(code.chars, prefix.chars[-n:], 0, len(code.chars)),
        len(prefix.chars),
        min(len(prefix.chars), MIN_ANCHOR_CHARS),
    )
    if found is None:
        return None
    length, hits = found
    return min((hit + length for hit in hits), key=lambda end: abs(end - len(prefix.chars)))


def _suffix_start(code: _Squeezed, suffix: _Squeezed, after: int) -> int | None:
    """Index in code.chars where the user's suffix begins (at or after `after`), tolerating a cut-off end."""
    if code.chars.endswith(suffix.chars) and len(code.chars) - len(suffix.chars) >= after:
        return len(code.chars) - len(suffix.chars)
    found = _longest_found(
        lambda n: _occurrences(code.chars, suffix.chars[:n], after, len(code.chars)),
        len(suffix.chars),
        min(len(suffix.chars), MIN_ANCHOR_CHARS),
    )
    if found is None:
        return None
    _, hits = found
    return min(hits, key=lambda start: abs((len(code.chars) - start) - len(suffix.chars)))


def _leading_ws(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


def _trailing_ws(text: str) -> str:
    return text[len(text.rstrip()) :]


def splice_infill(prefix: str, suffix: str, model_output: str) -> str | None:
    """The text that goes between `prefix` and `suffix`, recovered from the model's whole-file answer.

    The answer's first code block is used (or, without one, the answer itself); it should read prefix + middle +
    suffix. Anchors are matched ignoring whitespace and line endings, so re-indentation, CRLF and blank-line changes
    at the joins do not matter, and the model may rewrite parts of the prefix before its last line or drop the end
    of the suffix. Whitespace at the joins is reconciled with what the prefix already ends with and the suffix
    starts with. The middle gets the user's line endings (CRLF when the prefix or suffix has them). None when the
    answer does not contain the prefix's end and the suffix's start in that order.
    """
    code = extract_first_code(model_output)
    if code is None:
        code = extract_first_code(model_output, allow_unterminated=True) or _normalize_newlines(model_output)
    user_prefix, user_suffix = _normalize_newlines(prefix), _normalize_newlines(suffix)
    squeezed = _Squeezed(code)

    if _Squeezed(user_prefix).chars:
        kept_end = _prefix_end(squeezed, _Squeezed(user_prefix))
        if kept_end is None:
            return None
        start = squeezed.positions[kept_end - 1] + 1 if kept_end else 0
        gap = _leading_ws(code[start:])
        owned = _trailing_ws(user_prefix)
        start += len(owned) if gap.startswith(owned) else len(gap)
    else:
        kept_end, start = 0, 0

    if _Squeezed(user_suffix).chars:
        kept_start = _suffix_start(squeezed, _Squeezed(user_suffix), kept_end)
        if kept_start is None:
            return None
        end = squeezed.positions[kept_start]
        gap = _trailing_ws(code[:end])
        owned = _leading_ws(user_suffix)
        end -= len(owned) if gap.endswith(owned) else len(gap)
    else:
        end = len(code)

    if end < start:
        # The joins' whitespace overlaps: nothing to insert, unless the overlap holds code (anchors out of order).
        return "" if not code[end:start].strip() else None
    middle = code[start:end]
    if "\r\n" in prefix or "\r\n" in suffix:
        middle = middle.replace("\n", "\r\n")
    return middle
