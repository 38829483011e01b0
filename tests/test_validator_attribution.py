"""strict's kernel attribution counts the candidate's Triton kernels as its own: the @triton.jit functions of its
module are found through autotune/heuristics wrappers, and nothing else in the module is taken for one."""

from __future__ import annotations

import types

from dice_copilot.validator.harness import _triton_kernel_names


def _triton_object(class_name: str, fn):
    """An object shaped like triton's JITFunction / Autotuner: a class from a triton module holding `fn`."""
    cls = type(class_name, (), {"__module__": "triton.runtime.jit"})
    obj = cls()
    obj.fn = fn
    return obj


def test_jit_functions_under_wrappers_are_the_candidates_kernels():
    def gelu_kernel(x_ptr, y_ptr, n):
        pass

    def matmul_kernel(a_ptr, b_ptr, c_ptr):
        pass

    def helper(x):
        return x

    namespace = {
        "gelu_kernel": _triton_object("JITFunction", gelu_kernel),
        "matmul_kernel": _triton_object("Autotuner", _triton_object("JITFunction", matmul_kernel)),
        "helper": helper, "torch": types.ModuleType("torch"), "SIZE": 4096,
    }
    exec("class ModelNew:\n    def forward(self, x):\n        return x\n", namespace)
    assert _triton_kernel_names(namespace["ModelNew"]()) == {"gelu_kernel", "matmul_kernel"}
