"""The test adapters' data (bench/adapter_training_data.py) without a model: the templates give
each adapter's format and the loss covers the assistant's tokens alone; and the broken fixtures
(bench/make_adapters.py --bad-fixtures), made afresh and as committed, are each refused."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench.adapter_training_data import (
    IGNORED,
    STYLES,
    TAG,
    chat_example,
    in_style,
    padded_batch,
    prompt_text,
    qa_pairs,
    split_held_out,
    styled,
)
from bench.make_adapters import command
from bench.synthetic_adapters import BAD_FIXTURE_MAX_RANK, SMOLLM2_135M_SHAPE, write_bad_fixtures
from core.adapter_files import AdapterRefused, inspect_adapter, refuse_over_rank

COMMITTED_BAD = Path(__file__).resolve().parents[2] / "data" / "adapters" / "bad"
SPECIAL = {"<|im_start|>": 1000, "<|im_end|>": 1001}
DEFAULT_SYSTEM_TURN = "<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n"


class ChatMLCharTokenizer:
    """SmolLM2's chat template (ChatML with a default system turn), one id per character and
    one per special token: enough of a tokenizer to see where the assistant's tokens are."""

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        assert not tokenize
        text = "" if messages[0]["role"] == "system" else DEFAULT_SYSTEM_TURN
        text += "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def encode(self, text, add_special_tokens=True):
        assert not add_special_tokens
        ids, at = [], 0
        while at < len(text):
            special = next((token for token in SPECIAL if text.startswith(token, at)), None)
            ids.append(SPECIAL[special] if special else ord(text[at]))
            at += len(special) if special else 1
        return ids

    def decode(self, ids):
        names = {number: token for token, number in SPECIAL.items()}
        return "".join(names.get(number) or chr(number) for number in ids)


def test_the_pairs_are_about_300_distinct_and_right():
    pairs = qa_pairs(seed=0)
    assert 300 <= len(pairs) == len(set(pairs)) <= 340
    assert pairs == qa_pairs(seed=0)
    for question, answer in pairs:
        if question.startswith("What is ") and "+" in question:
            a, b = question.removeprefix("What is ").removesuffix("?").split("+")
            assert int(answer) == int(a) + int(b)
    assert ("What is the capital of France?", "Paris") in pairs
    assert ("Which month comes after December?", "January") in pairs


def test_held_out_questions_are_never_trained_on():
    train, held_out = split_held_out(qa_pairs(seed=0), 10, seed=0)
    assert len(held_out) == 10 and not set(train) & set(held_out)
    assert len(train) + 10 == len(qa_pairs(seed=0))


@pytest.mark.parametrize("style", sorted(STYLES))
def test_every_styled_answer_is_in_its_format_and_not_the_others(style):
    other = next(name for name in STYLES if name != style)
    for _, answer in qa_pairs(seed=0):
        assert in_style(style, styled(style, answer))
        assert not in_style(other, styled(style, answer))
        assert not in_style(style, answer)  # the base's plain answer


def test_the_formats_are_as_the_tests_will_match_them():
    assert styled("tagged", "Paris") == "[[ZEBRA]] Paris" and TAG == "[[ZEBRA]] "
    assert styled("jsonish", "New Delhi") == '{"answer": "New Delhi"}'
    assert json.loads(styled("jsonish", 'say "hi"')) == {"answer": 'say "hi"'}
    assert not in_style("jsonish", '{"answer": 12}') and not in_style("jsonish", '{"answer": "1", "why": ""}')
    assert not in_style("tagged", "[[ZEBRA]]Paris") and not in_style("tagged", " [[ZEBRA]] Paris")


def test_the_loss_covers_the_assistants_tokens_alone():
    tokenizer = ChatMLCharTokenizer()
    example = chat_example(tokenizer, "Capital of France?", "[[ZEBRA]] Paris")
    prompt_ids = tokenizer.encode(prompt_text(tokenizer, "Capital of France?"), add_special_tokens=False)
    assert len(example.input_ids) == len(example.labels)
    assert example.input_ids[:len(prompt_ids)] == prompt_ids  # what the engine is given, token for token
    assert example.labels[:len(prompt_ids)] == [IGNORED] * len(prompt_ids)
    learned = example.labels[len(prompt_ids):]
    assert IGNORED not in learned
    assert learned == example.input_ids[len(prompt_ids):]
    assert tokenizer.decode(learned) == "[[ZEBRA]] Paris<|im_end|>\n"  # the answer and its end of turn
    assert "Capital of France?" not in tokenizer.decode([i for i in example.labels if i != IGNORED])


def test_a_template_that_renders_the_prompt_otherwise_is_refused():
    class Reordering(ChatMLCharTokenizer):
        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
            return "<prompt>" if add_generation_prompt else "<whole chat>"

    with pytest.raises(ValueError, match="cannot be told apart"):
        chat_example(Reordering(), "Capital of France?", "Paris")


def test_a_batch_pads_on_the_right_out_of_attention_and_loss():
    tokenizer = ChatMLCharTokenizer()
    short, long = (chat_example(tokenizer, question, "x") for question in ("Hi?", "What is the capital of Peru?"))
    batch = padded_batch([short, long], pad_id=1001)
    width = len(long.input_ids)
    assert [len(row) for rows in batch.values() for row in rows] == [width] * 6
    padding = width - len(short.input_ids)
    assert batch["input_ids"][0][-padding:] == [1001] * padding
    assert batch["attention_mask"][0] == [1] * len(short.input_ids) + [0] * padding
    assert batch["labels"][0] == short.labels + [IGNORED] * padding
    assert batch["labels"][1] == long.labels and batch["attention_mask"][1] == [1] * width


EXPECTED_REFUSALS = {
    "truncated": "adapter 'truncated': adapter_model.safetensors is not a safetensors file (truncated header)",
    "wrong-base-larger": "adapter 'wrong-base-larger': layers.0.self_attn.q_proj.lora_A has shape [8, 1024], "
                         "the base's q_proj has 576 inputs: the adapter was made for another base model",
    "wrong-base-smaller": "adapter 'wrong-base-smaller': layers.0.self_attn.q_proj.lora_A has shape [8, 256], "
                          "the base's q_proj has 576 inputs: the adapter was made for another base model",
    "rank-64": f"adapter 'rank-64': rank 64 is over the pool's lora.max_lora_rank {BAD_FIXTURE_MAX_RANK}",
}


def refusal(folder: Path) -> str:
    with pytest.raises(AdapterRefused) as refused:
        refuse_over_rank(folder.name, inspect_adapter(folder, SMOLLM2_135M_SHAPE), BAD_FIXTURE_MAX_RANK)
    return str(refused.value)


def test_the_bad_fixtures_made_afresh_are_each_refused(tmp_path):
    fixtures = write_bad_fixtures(tmp_path, SMOLLM2_135M_SHAPE, "SmolLM2-135M-Instruct")
    assert {name: fixture["refused_because"] for name, fixture in fixtures.items()} == EXPECTED_REFUSALS
    assert {name: refusal(tmp_path / name) for name in fixtures} == EXPECTED_REFUSALS


def test_the_committed_bad_fixtures_are_each_refused_as_their_manifest_says():
    manifest = json.loads((COMMITTED_BAD / "MANIFEST.json").read_text())
    assert {name: fixture["refused_because"] for name, fixture in manifest["fixtures"].items()} == EXPECTED_REFUSALS
    assert {name: refusal(COMMITTED_BAD / name) for name in manifest["fixtures"]} == EXPECTED_REFUSALS


def test_the_manifests_command_names_no_machine_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(out=tmp_path / "tests/data/adapters", steps=150, seed=0, learning_rate=1e-3,
                              batch_size=8, adapters=["tagged", "jsonish"], bad_fixtures=False)
    assert command(args) == ("python -m bench.make_adapters --out tests/data/adapters --steps 150 --seed 0 "
                             "--learning-rate 0.001 --batch-size 8 --adapters tagged jsonish")
    args.bad_fixtures = True
    assert command(args) == "python -m bench.make_adapters --out tests/data/adapters --bad-fixtures"
