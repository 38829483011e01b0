"""DICE prompt templates byte for byte, first-code-block extraction, and infill splicing of whole-file answers."""

import hashlib
import json
from pathlib import Path

import pytest

from dice_copilot.model.prompts import (
    end_to_end_prompt,
    example_infill_parts,
    example_model_new,
    extract_first_code,
    infill_prompt,
    splice_infill,
)

# Expected prompts rendered by DICE's own template code (see the "source" field of the file) for inputs written
# for this project.
REFERENCE = json.loads((Path(__file__).parent / "data" / "dice_prompts_reference.json").read_text(encoding="utf-8"))


def test_end_to_end_prompt_matches_dice_byte_for_byte():
    assert end_to_end_prompt(REFERENCE["pytorch_code"]) == REFERENCE["end_to_end_prompt"]


def test_infill_prompt_matches_dice_byte_for_byte():
    got = infill_prompt(REFERENCE["pytorch_code"], REFERENCE["prefix"], REFERENCE["suffix"])
    assert got == REFERENCE["infill_prompt"]


def test_prompts_open_the_assistant_turn_like_dice():
    # The f-string template keeps its final newline; Jinja2 drops the infilling template's.
    assert end_to_end_prompt("x").endswith("<|im_end|>\n<|im_start|>assistant\n\n")
    assert infill_prompt("x", "p", "s").endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert end_to_end_prompt("x").startswith("<|im_start|>user\nYou write custom CUDA kernels")


def test_user_text_with_braces_and_template_markers_is_inserted_verbatim():
    tricky = "s = '{{prefix}} {x} {{suffix}}'\n__global__ void k() { }"
    prompt = infill_prompt(tricky, "P{{suffix}}", "S")
    assert prompt.count(tricky) == 1
    assert "```\nP{{suffix}}\n``` \n\nThe corresponding CUDA kernel suffix: \n\n```\nS\n```" in prompt
    assert f"    ```\n    {tricky}\n    ```\n" in end_to_end_prompt(tricky)


def test_one_shot_example_files_are_unmodified():
    digests = {
        "model_ex_add.py": "39d81d430838294b3e705b105d7dfd57d90888b7b449426510c621e6f9035c5d",
        "model_new_ex_add.py": "6b5b3805953a590b0b0d635b84663caf573d1e38f9522898598fd05644b451e4",
    }
    folder = Path(__file__).parents[1] / "model" / "prompt_examples"
    for name, digest in digests.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


# --- extract_first_code ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, code",
    [
        ("```python\nimport torch\nx = 1\n```", "import torch\nx = 1"),
        ("Here it is:\n```cpp\n__global__ void k() {}\n```\nDone.", "__global__ void k() {}"),
        ("```\nimport torch\n```", "import torch"),
        ("```python\nfirst = 1\n```\n\n```python\nsecond = 2\n```", "first = 1"),
        ("```python\r\nimport torch\r\nx = 1\r\n```\r\n", "import torch\nx = 1"),
        ("```\npython_path = 'x'\n```", "python_path = 'x'"),
        ("```cuda\n__global__ void k() {}\n```", "cuda\n__global__ void k() {}"),
    ],
    ids=["python-tag", "cpp-tag", "no-tag", "first-of-two", "crlf", "identifier-not-tag", "other-tag-kept"],
)
def test_extract_first_code(answer, code):
    assert extract_first_code(answer) == code


def test_extract_first_code_without_a_block_is_none():
    assert extract_first_code("I cannot help with that.") is None
    assert extract_first_code("") is None


def test_extract_first_code_of_a_cut_off_answer():
    cut = "```python\nimport torch\nclass ModelNew(nn.Module):\n    def forw"
    assert extract_first_code(cut) is None
    assert extract_first_code(cut, allow_unterminated=True) == "import torch\nclass ModelNew(nn.Module):\n    def forw"


# --- splice_infill --------------------------------------------------------------------------------------------

KERNEL_PREFIX = """import torch
from torch.utils.cpp_extension import load_inline

# scale then relu
source = \"\"\"
__global__ void scale_relu_kernel(const float* x, float* out, float scale, int n) {
"""
KERNEL_MIDDLE = """    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i] * scale, 0.0f);
"""
KERNEL_SUFFIX = """}
\"\"\"

scale_relu = load_inline(name="scale_relu", cpp_sources=cpp, cuda_sources=source, functions=["scale_relu_cuda"])
"""


def fenced(code: str) -> str:
    return f"```python\n{code}```"


def test_splice_returns_exactly_the_middle():
    answer = fenced(KERNEL_PREFIX + KERNEL_MIDDLE + KERNEL_SUFFIX)
    middle = splice_infill(KERNEL_PREFIX, KERNEL_SUFFIX, answer)
    assert middle == KERNEL_MIDDLE
    assert KERNEL_PREFIX + middle + KERNEL_SUFFIX == KERNEL_PREFIX + KERNEL_MIDDLE + KERNEL_SUFFIX


def test_splice_recovers_the_one_shot_example_middle():
    prefix, middle, suffix = example_infill_parts()
    assert splice_infill(prefix, suffix, fenced(example_model_new())) == middle


def test_splice_of_a_crlf_answer_into_an_lf_file():
    answer = fenced(KERNEL_PREFIX + KERNEL_MIDDLE + KERNEL_SUFFIX).replace("\n", "\r\n")
    assert splice_infill(KERNEL_PREFIX, KERNEL_SUFFIX, answer) == KERNEL_MIDDLE


def test_splice_into_a_crlf_file_gives_crlf_middle():
    prefix, suffix = KERNEL_PREFIX.replace("\n", "\r\n"), KERNEL_SUFFIX.replace("\n", "\r\n")
    answer = fenced(KERNEL_PREFIX + KERNEL_MIDDLE + KERNEL_SUFFIX)
    assert splice_infill(prefix, suffix, answer) == KERNEL_MIDDLE.replace("\n", "\r\n")


def test_splice_tolerates_reindented_and_blank_line_changes_at_the_joins():
    answer = fenced(
        KERNEL_PREFIX.replace("__global__", "  __global__") + "\n" + KERNEL_MIDDLE + "\n\n" + KERNEL_SUFFIX
    )
    middle = splice_infill(KERNEL_PREFIX, KERNEL_SUFFIX, answer)
    assert middle.strip() == KERNEL_MIDDLE.strip()


def test_splice_tolerates_the_model_rewriting_the_start_of_the_prefix():
    rewritten = KERNEL_PREFIX.replace("# scale then relu", "# fused scale + ReLU kernel").replace(
        "import torch\n", "import torch\nimport torch.nn as nn\n"
    )
    answer = fenced(rewritten + KERNEL_MIDDLE + KERNEL_SUFFIX)
    assert splice_infill(KERNEL_PREFIX, KERNEL_SUFFIX, answer) == KERNEL_MIDDLE


def test_splice_with_the_cursor_mid_line():
    prefix = KERNEL_PREFIX + "    int i = "
    suffix = ";\n" + "    if (i < n) out[i] = fmaxf(x[i] * scale, 0.0f);\n" + KERNEL_SUFFIX
    answer = fenced(KERNEL_PREFIX + KERNEL_MIDDLE + KERNEL_SUFFIX)
    assert splice_infill(prefix, suffix, answer) == "blockIdx.x * blockDim.x + threadIdx.x"


def test_splice_of_an_answer_cut_inside_the_suffix():
    answer = "```python\n" + KERNEL_PREFIX + KERNEL_MIDDLE + KERNEL_SUFFIX[:40]
    assert splice_infill(KERNEL_PREFIX, KERNEL_SUFFIX, answer) == KERNEL_MIDDLE


def test_splice_of_an_unfenced_answer():
    assert splice_infill(KERNEL_PREFIX, KERNEL_SUFFIX, KERNEL_PREFIX + KERNEL_MIDDLE + KERNEL_SUFFIX) == KERNEL_MIDDLE


def test_splice_with_nothing_to_insert_is_empty():
    assert splice_infill(KERNEL_PREFIX, KERNEL_SUFFIX, fenced(KERNEL_PREFIX + KERNEL_SUFFIX)) == ""
    # Prefix and suffix both claim the one newline between them.
    assert splice_infill("int a = 1;\n", "\nint b = 2;", fenced("int a = 1;\nint b = 2;\n")) == ""


def test_splice_is_none_when_the_answer_does_not_contain_the_skeleton():
    assert splice_infill(KERNEL_PREFIX, KERNEL_SUFFIX, fenced("import numpy as np\nprint('unrelated')\n")) is None
    assert splice_infill(KERNEL_PREFIX, KERNEL_SUFFIX, "no code at all") is None
    # Prefix present but the suffix never appears.
    assert splice_infill(KERNEL_PREFIX, KERNEL_SUFFIX, fenced(KERNEL_PREFIX + KERNEL_MIDDLE + "}\n")) is None


def test_splice_with_empty_prefix_or_suffix():
    whole = KERNEL_PREFIX + KERNEL_MIDDLE + KERNEL_SUFFIX
    assert splice_infill("", KERNEL_MIDDLE + KERNEL_SUFFIX, fenced(whole)) == KERNEL_PREFIX
    assert splice_infill(KERNEL_PREFIX + KERNEL_MIDDLE, "", fenced(whole)) == KERNEL_SUFFIX.rstrip("\n")
