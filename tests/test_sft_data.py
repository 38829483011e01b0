"""SFT data: record shapes, pad-to-block with trained pads, dropping, packing and the deterministic row stream."""

import pytest
from sft_helpers import kernel_source, make_tokenizer, prompt_for, records, write_jsonl

from dice_copilot.trainer.sft import load_tokenizer_dir
from dice_copilot.trainer.sft_data import (
    RowStream,
    SFTDataError,
    SFTSample,
    load_sft_samples,
    pack_rows,
    render_record,
    tokenize_sample,
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer_dir(make_tokenizer(tmp_path_factory.mktemp("tok")))


def test_prompt_response_record_pads_to_whole_blocks_with_trained_pads(tokenizer):
    prompt, response = render_record(records(["relu"])[0], "x")
    assert prompt == prompt_for("relu") and response == kernel_source("relu") + "<|im_end|>\n"
    sample = tokenize_sample(prompt, response, tokenizer, block_size=4, pad_token_id=tokenizer.pad_token_id)
    unpadded = tokenizer.encode(prompt) + tokenizer.encode(response)
    assert len(sample.token_ids) % 4 == 0 and len(sample.token_ids) - len(unpadded) < 4
    assert list(sample.token_ids[: len(unpadded)]) == unpadded
    assert set(sample.token_ids[len(unpadded):]) <= {tokenizer.pad_token_id}
    assert sample.prompt_length == len(tokenizer.encode(prompt))
    # Pads after <|im_end|> are answer tokens (trained), as in DICE's LLaMA-Factory packing.
    assert sample.answer_tokens == len(sample.token_ids) - sample.prompt_length


def test_messages_and_text_records():
    prompt, response = render_record(
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}, "x"
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" and response == "yo<|im_end|>\n"
    assert render_record({"text": "plain"}, "x") == ("", "plain<|endoftext|>")
    with pytest.raises(SFTDataError, match="f.jsonl:3: a record needs"):
        render_record({"question": "?"}, "f.jsonl:3")
    with pytest.raises(SFTDataError, match="last message must be the assistant"):
        render_record({"messages": [{"role": "user", "content": "hi"}]}, "x")


def test_an_infill_task_renders_as_the_infill_prompt_and_the_whole_file_the_splice_cuts_its_middle_from():
    from dice_copilot.model.prompts import infill_prompt, splice_infill

    prefix, suffix = "import torch\n\n", "\nmod = load_inline(name='m', cuda_sources=src)\nclass ModelNew: pass\n"
    middle = 'src = r"""__global__ void k(float* y) { y[threadIdx.x] = 1.f; }"""\n'
    task = {"id": "t", "pytorch_code": "class Model: pass\n", "cuda_code": prefix + middle + suffix,
            "prefix": prefix, "middle": middle, "suffix": suffix}
    prompt, response = render_record(task, "x")
    assert prompt == infill_prompt(task["pytorch_code"], prefix, suffix)
    assert response.startswith("```python\n") and response.endswith("```<|im_end|>\n")
    assert splice_infill(prefix, suffix, response.removesuffix("<|im_end|>\n")).strip() == middle.strip()
    with pytest.raises(SFTDataError, match="must be strings"):
        render_record({**task, "middle": None}, "x")


def test_loading_drops_samples_longer_than_seq_len_and_reports_bad_lines(tmp_path, tokenizer):
    long_record = {"prompt": prompt_for("relu"), "response": kernel_source("relu") * 20}
    path = write_jsonl(tmp_path / "d.jsonl", records() + [long_record])
    samples, stats = load_sft_samples([path], tokenizer, 4, tokenizer.pad_token_id, seq_len=128)
    assert stats.records == 7 and stats.kept == 6 and stats.dropped_too_long == 1
    assert all(len(s.token_ids) <= 128 for s in samples)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(SFTDataError, match="bad.jsonl:2: not valid JSON"):
        load_sft_samples([bad], tokenizer, 4, 0, 128)
    with pytest.raises(SFTDataError, match="raise seq_len"):
        load_sft_samples([path], tokenizer, 4, 0, seq_len=8)


def test_best_fit_packing_respects_capacity_and_keeps_every_sample_once():
    lengths = [60, 40, 30, 70, 20, 100, 10, 50]
    rows = pack_rows(lengths, range(len(lengths)), seq_len=100, packing=True)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 100 for row in rows)
    assert len(rows) == 4  # 380 tokens in rows of 100: best fit reaches the minimum
    assert pack_rows(lengths, range(3), seq_len=100, packing=False) == [[0], [1], [2]]


def test_row_stream_layout_positions_restart_per_sample_and_filler_is_untrained():
    samples = [SFTSample(tuple(range(1, 9)), 3), SFTSample(tuple(range(1, 13)), 5), SFTSample((7,) * 4, 0)]
    stream = RowStream(samples, seq_len=24, packing=True, seed=0)
    rows = stream.epoch_rows(0)
    batch = stream.batch(range(len(rows)), pad_token_id=0)
    assert batch.input_ids.shape == (len(rows), 24)
    assert batch.answer_tokens == 5 + 7 + 4 == stream.answer_tokens(range(len(rows)))
    assert batch.real_tokens == 24
    for r, row in enumerate(rows):
        start = 0
        for segment, index in enumerate(row):
            n = len(samples[index].token_ids)
            assert batch.position_ids[r, start:start + n].tolist() == list(range(n))
            assert (batch.segment_ids[r, start:start + n] == segment).all()
            start += n
        assert not batch.answer_mask[r, start:].any()  # filler after the last sample


def test_row_stream_is_deterministic_and_epochs_reshuffle():
    samples = [SFTSample((1,) * (4 * (i % 5 + 1)), 2) for i in range(40)]
    a = RowStream(samples, seq_len=32, packing=True, seed=3)
    b = RowStream(samples, seq_len=32, packing=True, seed=3)
    n0 = len(a.epoch_rows(0))
    assert a.rows(range(n0 + 5)) == b.rows(range(n0 + 5))
    assert a.epoch_rows(0) != a.epoch_rows(1)
    assert a.locate(n0) == (1, 0) and a.epoch_of(n0) == 1.0
