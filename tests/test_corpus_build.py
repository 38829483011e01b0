"""The pretraining corpus build: licence rules, chunking, a build from a source distribution served by a local
package index (fetched, sha256-checked, licence-filtered, deduplicated, held out, with a manifest), and the SFT
reader taking its output."""

from __future__ import annotations

import email.message
import hashlib
import http.server
import io
import json
import lzma
import tarfile
import threading
from collections import Counter
from pathlib import Path

import pytest

from dice_copilot.trainer.corpus.build import CorpusConfig, CorpusError, build_corpus, chunk_text
from dice_copilot.trainer.corpus.licences import package_licence, permissive_expression, spdx_of_file
from dice_copilot.trainer.corpus.sources import SourceError, fetch_sdist, installed_packages
from dice_copilot.trainer.jsonl import json_objects
from dice_copilot.trainer.sft_data import render_record


@pytest.mark.parametrize("expression, permissive", [
    ("MIT", True), ("BSD-3-Clause", True), ("Apache-2.0 WITH LLVM-exception", True), ("GPL-3.0-only", False),
    ("MIT OR GPL-2.0", True), ("MIT AND GPL-2.0", False), ("BSD-3-Clause AND (MIT OR Apache-2.0)", True),
    ("MPL-2.0 AND MIT", False), ("", False), ("LicenseRef-Proprietary", False)])
def test_permissive_expressions(expression, permissive):
    assert permissive_expression(expression) is permissive


def _metadata(**fields) -> email.message.Message:
    message = email.message.Message()
    for key, values in fields.items():
        for value in values if isinstance(values, list) else [values]:
            message[key.replace("_", "-")] = value
    return message


def test_package_licence_prefers_the_expression_then_classifiers_then_the_field_then_the_text():
    assert package_licence(_metadata(License_Expression="Apache-2.0", License="GPL")) == "Apache-2.0"
    assert package_licence(_metadata(Classifier=["Programming Language :: Python",
                                                 "License :: OSI Approved :: BSD License"])) == "BSD"
    assert package_licence(_metadata(License="MIT")) == "MIT"
    assert package_licence(_metadata(), "Permission is hereby granted, free of charge, to any person") == "MIT"
    assert package_licence(_metadata(License="Proprietary")) == "Proprietary"
    assert spdx_of_file("// SPDX-License-Identifier: BSD-3-Clause\nint x;") == "BSD-3-Clause"
    assert spdx_of_file("/* SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception */\n") == \
        "Apache-2.0 WITH LLVM-exception"


def test_chunks_respect_the_limit_and_keep_every_character():
    text = "\n\n".join(f"def f{i}():\n" + "    x = 1\n" * (i % 7 + 1) for i in range(200)) + "\n" + "y" * 900 + "\n"
    chunks = chunk_text(text, 300)
    assert all(len(c) <= 301 for c in chunks)
    # Only line breaks move: a line longer than the limit is the one thing cut inside a line.
    assert "".join(chunks).replace("\n", "") == text.replace("\n", "")
    assert all(c.endswith("\n") for c in chunks)
    assert chunk_text("short\n", 300) == ["short\n"]


def _kernel(name: str, body: str) -> str:
    return (f"// kernels for {name}\n#include <cuda_runtime.h>\n\n__global__ void {name}(const float* x, float* y, "
            f"int n) {{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) {{\n    {body}\n  }}\n}}\n")


def _sdist(files: dict[str, str], licence: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        files = {"PKG-INFO": f"Metadata-Version: 2.4\nName: toykern\nVersion: 1.0\nLicense-Expression: {licence}\n",
                 **files}
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"toykern-1.0/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def index(tmp_path):
    """A PEP 691 index on loopback serving the sdists put into `packages` (name -> (filename, bytes, sha256))."""
    packages: dict[str, tuple[str, bytes, str]] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            parts = self.path.strip("/").split("/")
            if parts[0] == "simple" and parts[1] in packages:
                filename, _, digest = packages[parts[1]]
                body = json.dumps({"files": [{"filename": filename, "url": f"{base}/files/{filename}",
                                              "hashes": {"sha256": digest}}]}).encode()
            elif parts[0] == "files":
                body = next(data for filename, data, _ in packages.values() if filename == parts[1])
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"{base}/simple", packages
    server.shutdown()


def _publish(packages, name, data, digest=None):
    packages[name] = (f"{name}-1.0.tar.gz", data, digest or hashlib.sha256(data).hexdigest())


def test_build_from_a_source_distribution_filters_dedups_holds_out_and_writes_a_manifest(tmp_path, index):
    index_url, packages = index
    files = {f"csrc/k{i}.cu": _kernel(f"op{i}", f"y[i] = x[i] * {i}.5f + {i * i}.0f; // step {i}") for i in range(40)}
    files["csrc/copy.cu"] = files["csrc/k3.cu"].replace("// kernels for op3", "// kernels for op3 (a copy)")
    files["csrc/gpl_part.cu"] = "// SPDX-License-Identifier: GPL-2.0-only\n" + _kernel("gpl", "y[i] = -x[i];")
    files["README.md"] = "not code"
    _publish(packages, "toykern", _sdist(files, "BSD-3-Clause"))
    out = tmp_path / "corpus"
    stats = build_corpus(CorpusConfig(out=out, sources=("sdist",), sdists=("toykern==1.0",), index_url=index_url,
                                      heldout_fraction=0.25, compress=True), log=lambda m: None)
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    kept = {row["file"] for row in manifest}
    assert "csrc/gpl_part.cu" not in kept and "README.md" not in kept
    assert ("csrc/copy.cu" in kept) != ("csrc/k3.cu" in kept), "the near copy is dropped, its original kept"
    assert stats["skipped"]["licence_not_permissive"] == 1 and stats["skipped"]["near_duplicate"] == 1
    assert {row["licence"] for row in manifest} == {"BSD-3-Clause"}
    assert all(row["package"] == "toykern" and row["version"] == "1.0" and len(row["sha256"]) == 64
               for row in manifest)
    splits = Counter(row["split"] for row in manifest)
    assert splits["train"] and splits["heldout"], splits
    # Each text is in exactly one split, and the SFT reader takes the compressed file as plain-text samples.
    train = [record for _, record in json_objects(out / "train.jsonl.xz", ValueError)]
    heldout = [json.loads(line) for line in lzma.open(out / "heldout.jsonl.xz", "rt")]
    assert len(train) + len(heldout) == sum(row["chunks"] for row in manifest)
    assert not {r["text"] for r in train} & {r["text"] for r in heldout}
    prompt, response = render_record(train[0], "train:1")
    assert prompt == "" and "__global__" in response
    assert stats["variety"]["train"]["distinct_words"] > 50 and (out / "stats.md").is_file()
    # A rebuild from the cached sdist gives the same manifest.
    build_corpus(CorpusConfig(out=tmp_path / "again", sources=("sdist",), sdists=("toykern==1.0",),
                              index_url=index_url, sdist_cache=out / "sdists", heldout_fraction=0.25),
                 log=lambda m: None)
    assert (tmp_path / "again" / "manifest.jsonl").read_text() == (out / "manifest.jsonl").read_text()


def test_a_download_whose_hash_differs_from_the_index_is_refused(tmp_path, index):
    index_url, packages = index
    _publish(packages, "toykern", _sdist({"a.cu": _kernel("a", "y[i] = x[i];")}, "MIT"), digest="0" * 64)
    with pytest.raises(SourceError, match="sha256"):
        fetch_sdist("toykern", "1.0", tmp_path, index_url)
    with pytest.raises(SourceError, match="no source distribution"):
        fetch_sdist("toykern", "2.0", tmp_path, index_url)


def test_unpinned_sdists_and_empty_builds_are_clear_errors(tmp_path, index):
    index_url, packages = index
    with pytest.raises(SourceError, match="NAME==VERSION"):
        build_corpus(CorpusConfig(out=tmp_path, sources=("sdist",), sdists=("toykern",), index_url=index_url),
                     log=lambda m: None)
    _publish(packages, "toykern", _sdist({"a.cu": _kernel("a", "y[i] = x[i];")}, "GPL-3.0-only"))
    with pytest.raises(CorpusError, match="no file was kept"):
        build_corpus(CorpusConfig(out=tmp_path / "gpl", sources=("sdist",), sdists=("toykern==1.0",),
                                  index_url=index_url), log=lambda m: None)


def test_installed_packages_carry_their_licence_and_never_this_project():
    files = list(installed_packages(Counter(), {"psutil", "dice-copilot"}))
    assert files and {f.package for f in files} == {"psutil"}
    assert all(permissive_expression(f.licence) for f in files)
    assert all(Path(f.path).suffix in {".py", ".c", ".h"} for f in files)
