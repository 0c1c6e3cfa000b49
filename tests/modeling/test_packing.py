"""Packed causal-LM pretraining without cross-document attention (`pack_documents`) and linear-memory attention.

Each document of a packed row gives the logits and gradients it gives alone; attention keeps to the documents
without a (T, T) mask under sdpa (`packing.PackedSequences`); packed blocks restart their positions per document
and take no loss across a boundary; configurations that cannot keep documents apart are refused before any step;
attention memory grows linearly with the sequence on the paths that return no attention weights. The documents'
boundaries that the collate finds on the CPU (`packed_sequences`, transformers' `cu_seq_lens_*`) change no output,
move with the batch, and let the training step read nothing back."""

import json
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
from accelerate.utils import send_to_device
from conftest import REPO, preset
from host_reads import HostReads
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import (
    DataCollatorWithFlattening,
    OpenAIGPTConfig,
    OpenAIGPTLMHeadModel,
)

from modeling import LineageGptForCausalLM
from modeling.checks import value_checks
from modeling.packing import VARLEN_KEYWORDS, PackedSequences, document_masking_error
from train import pretrain_gpt
from train.data.collators import CausalLMCollator, check_batch_values
from train.data.tokenization import train_tokenizer
from train.run.recipes import RecipeError

ATTENTION = ("sdpa", "eager")
RELATIVE = {"max_relative_position": 8}
POSITIONS = ({}, {"position_embedding_type": "relative-keys", **RELATIVE},
             {"position_embedding_type": "relative", **RELATIVE},
             {"position_embedding_type": "relative", "absolute_and_relative": True, **RELATIVE})


def build(attn: str = "sdpa", **overrides) -> LineageGptForCausalLM:
    config = preset("gpt-tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **overrides)
    config._attn_implementation = attn
    return LineageGptForCausalLM(config)


def packed_rows(lengths_per_row: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, list[list[torch.Tensor]]]:
    """(input_ids, position_ids) of rows packing documents of the given lengths, and the documents."""
    documents = [[torch.randint(5, 99, (n,)) for n in row] for row in lengths_per_row]
    ids = torch.stack([torch.cat(row) for row in documents])
    positions = torch.stack([torch.cat([torch.arange(len(d)) for d in row]) for row in documents])
    return ids, positions, documents


def document_labels(ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The collator's labels: no document's first token is predicted (from the previous document)."""
    return ids.masked_fill(positions == 0, -100)


# ---------------------------------------------------------------------------------------- per-document parity


@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("positions", POSITIONS, ids=("absolute", "relative-keys", "relative", "absolute+relative"))
@pytest.mark.parametrize("norm", ("post", "pre"))
def test_each_document_of_a_packed_row_gives_its_logits_alone(attn, positions, norm):
    """Rows of documents of lengths across several length buckets (1 to 40 tokens); fp32, 1e-5."""
    model = build(attn, norm_position=norm, **positions).eval()
    ids, position_ids, documents = packed_rows([[40, 1, 7, 16], [3, 33, 2, 26]])
    logits = model(ids, position_ids=position_ids).logits
    for row, row_documents in enumerate(documents):
        start = 0
        for document in row_documents:
            alone = model(document[None]).logits[0]
            torch.testing.assert_close(logits[row, start:start + len(document)], alone, rtol=1e-5, atol=1e-5)
            start += len(document)


@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("positions", POSITIONS[:2], ids=("absolute", "relative-keys"))
def test_packed_loss_and_gradients_equal_those_of_the_documents_alone(attn, positions):
    """Summed over tokens, the packed row's loss (labels masked at each document's first token) and its gradients
    are the sums of each document's own."""
    model = build(attn, **positions).train()
    ids, position_ids, documents = packed_rows([[20, 9, 35], [30, 34]])
    labels = document_labels(ids, position_ids)
    count = int((labels[:, 1:] != -100).sum())
    (model(ids, position_ids=position_ids, labels=labels).loss * count).backward()
    packed = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    for document in (d for row in documents for d in row):
        (model(document[None], labels=document[None]).loss * (len(document) - 1)).backward()
    assert count == sum(len(d) - 1 for row in documents for d in row)
    for name, p in model.named_parameters():
        torch.testing.assert_close(packed[name], p.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("attn", ATTENTION)
def test_position_ids_shared_by_every_row_pack_each_row_alike(attn):
    """(1, T) `position_ids` for a (B, T) batch, as transformers allows: every row split at the same places."""
    model = build(attn).eval()
    ids = torch.randint(5, 99, (3, 30))
    position_ids = torch.cat([torch.arange(12), torch.arange(18)])[None]
    logits = model(ids, position_ids=position_ids).logits
    for span in (slice(0, 12), slice(12, 30)):
        torch.testing.assert_close(logits[:, span], model(ids[:, span]).logits, rtol=1e-5, atol=1e-5)


def test_sdpa_keeps_documents_apart_without_a_mask():
    """Under sdpa the blocks get no mask: the documents go to `PackedSequences` (no (T, T) tensor built)."""
    model = build("sdpa").eval()
    seen = []
    model.transformer.layers[0].self_attn.sublayer.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append((args[1], kwargs.get("packed_sequences"))), with_kwargs=True)
    ids, position_ids, _ = packed_rows([[10, 22], [32]])
    model(ids, position_ids=position_ids)
    mask, sequences = seen[0]
    assert mask is None
    assert sequences.cu_seqlens.tolist() == [0, 10, 32, 64]


def test_bert_packed_rows_keep_sequences_apart_without_a_mask():
    """BERT's packed rows (restarting `position_ids`, no mask) under sdpa: bidirectional attention within each
    sequence through `PackedSequences`, each sequence's states as alone."""
    from modeling import LineageBertModel

    model = LineageBertModel(preset("bert-tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).eval()
    seen = []
    model.encoder.layers[0].self_attn.sublayer.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append((args[1], kwargs.get("packed_sequences"))), with_kwargs=True)
    ids, position_ids, documents = packed_rows([[9, 30, 3]])
    states = model(ids, position_ids=position_ids).last_hidden_state
    assert seen[0][0] is None and seen[0][1].cu_seqlens.tolist() == [0, 9, 39, 42]
    start = 0
    for document in documents[0]:
        alone = model(document[None]).last_hidden_state[0]
        torch.testing.assert_close(states[0, start:start + len(document)], alone, rtol=1e-5, atol=1e-5)
        start += len(document)


@pytest.mark.parametrize("causal", (True, False))
def test_packed_sequences_attend_as_each_sequence_alone(causal):
    """`PackedSequences.attend` equals SDPA run on each sequence by itself; padding stays under the real tokens."""
    lengths = torch.tensor([1, 2, 3, 5, 8, 9, 17, 31, 32, 33])
    sequences = PackedSequences.from_lengths(lengths)
    padded = sum(int(index.numel()) for index, _ in sequences.buckets)
    assert padded < 2 * int(lengths.sum())
    q, k, v = (torch.randn(int(lengths.sum()), 4, 8) for _ in range(3))
    out = sequences.attend(q, k, v, is_causal=causal, scaling=8**-0.5, dropout=0.0)
    start = 0
    for n in lengths.tolist():
        span = slice(start, start + n)
        alone = torch.nn.functional.scaled_dot_product_attention(
            *(x[span].transpose(0, 1) for x in (q, k, v)), is_causal=causal).transpose(0, 1)
        torch.testing.assert_close(out[span], alone, rtol=1e-5, atol=1e-6)
        start += n


# ---------------------------------------------------------------------------------------------- bad input


def test_packed_rows_refuse_a_cache():
    model = build("sdpa").eval()
    ids, position_ids, _ = packed_rows([[10, 6]])
    ran = []
    model.transformer.embed_tokens.register_forward_pre_hook(lambda *_: ran.append(1))
    with pytest.raises(ValueError, match="cannot use a key/value cache: pass `use_cache=False`"):
        model(ids, position_ids=position_ids, use_cache=True)
    assert not ran


@pytest.mark.parametrize("attn", ("flash_attention_2", "flex_attention"))
def test_relative_positions_under_a_kernel_without_bias_cannot_mask_documents(attn):
    config = preset("gpt-tiny", position_embedding_type="relative-keys", **RELATIVE)
    config._attn_implementation = attn
    assert "relative positions (`position_embedding_type='relative-keys'`)" in document_masking_error(config)
    assert f"`attn_implementation={attn!r}`" in document_masking_error(config)
    for allowed in ("sdpa", "eager"):
        config._attn_implementation = allowed
        assert document_masking_error(config) is None


def test_a_transformers_gpt_folder_is_converted_and_trains_on_packed_documents(tmp_path):
    """A transformers OpenAIGPT folder (its own attention ignores restarting positions) is converted on load into a
    Lineage GPT, whose attention keeps each document to itself."""
    folder = tmp_path / "openai-gpt"
    config = OpenAIGPTConfig(vocab_size=300, n_positions=64, n_embd=32, n_layer=1, n_head=4)
    OpenAIGPTLMHeadModel(config).save_pretrained(folder)
    tokenizer = train_tokenizer("gpt", ["a few words of text"] * 20, 300, model_max_length=64)
    tokenizer.save_pretrained(folder)
    argv = ["--recipe", "gpt-pretrain-tiny", "--output_dir", str(tmp_path / "run"),
            "--model", str(folder), "--max_seq_length", "32", "--progress_bar", "false", "--max_steps", "1",
            "--train_size", "8", "--eval_size", "4", "--report_to", "none", "--max_new_tokens", "2"]
    results, _ = pretrain_gpt.main(argv)
    assert results["converted_from"] == "OpenAIGPTLMHeadModel" and results["steps"] == 1


def test_pack_documents_refuses_attention_that_cannot_mask_documents():
    model = build("sdpa", position_embedding_type="relative-keys", **RELATIVE)
    model.config._attn_implementation = "flex_attention"
    with pytest.raises(RecipeError, match="recipe key 'pack_documents' is true but relative positions .*under "
                                          "`attn_implementation='flex_attention'`.*set 'pack_documents: false'"):
        pretrain_gpt.check_document_packing(model)


def test_a_block_longer_than_the_position_table_is_refused_before_training(tmp_path):
    argv = ["--recipe", "gpt-pretrain-tiny", "--output_dir", str(tmp_path),
            "--max_seq_length", "65", "--model_overrides", json.dumps({"max_position_embeddings": 64}),
            "--progress_bar", "false"]
    with pytest.raises(RecipeError, match="recipe key 'max_seq_length' is 65 but the model has 64 positions"):
        pretrain_gpt.main(argv)


# ------------------------------------------------------------------------------------- from data to the loss


def test_collated_packed_blocks_train_each_document_alone():
    """`pack_documents` blocks through `CausalLMCollator` (no attention_mask, -100 at position 0) give the
    token-weighted mean of each document's own loss, documents cut by a block boundary included."""
    from train.data.encoders import pack_documents

    tokenizer = train_tokenizer("gpt", ["alpha beta gamma delta"] * 10, 300, model_max_length=64)
    assert tokenizer.pad_token_id == 0
    model = build("sdpa").eval()
    documents = [torch.randint(5, 99, (n,)).tolist() for n in (12, 3, 30, 7, 19)]
    eos = 4
    blocks = list(pack_documents(documents, 24, eos, drop_last=False))
    batch = CausalLMCollator(tokenizer)(blocks)
    assert "attention_mask" not in batch
    loss = model(**batch).loss
    # the same pieces, each alone: a document split by a block boundary continues as a new sequence
    pieces = []
    for block in blocks:
        starts = [i for i, p in enumerate(block["position_ids"]) if p == 0] + [len(block["input_ids"])]
        pieces += [block["input_ids"][a:b] for a, b in zip(starts, starts[1:])]
    assert [t for piece in pieces for t in piece] == [t for d in documents for t in (*d, eos)]
    losses = [(model(torch.tensor([p]), labels=torch.tensor([p])).loss * (len(p) - 1)) for p in pieces if len(p) > 1]
    torch.testing.assert_close(loss, sum(losses) / sum(len(p) - 1 for p in pieces), rtol=1e-5, atol=1e-6)


def test_pretrain_gpt_packs_documents_by_default(tmp_path):
    """The recipe key changes what is trained on (same seed, same blocks): both runs train to a finite loss."""
    def run(*argv):
        results, _ = pretrain_gpt.main([
            "--recipe", "gpt-pretrain-tiny", "--output_dir", str(tmp_path / str(len(argv))),
            "--max_steps", "2", "--train_size", "64", "--eval_size", "16", "--progress_bar", "false",
            "--report_to", "none", *argv])
        return results["eval_loss"]

    packed, unpacked = run(), run("--pack_documents", "false")
    assert torch.isfinite(torch.tensor([packed, unpacked])).all()
    assert packed != unpacked


# ------------------------------------------------------------------------- the collate's document boundaries

PAD = type("Tokenizer", (), {"pad_token_id": 0})()  # what `CausalLMCollator` reads of a tokenizer


def collated(documents_per_row: list[list[int]]) -> dict:
    """`CausalLMCollator` over packed rows of documents of the given lengths (shorter rows right-padded)."""
    features = [{"input_ids": torch.randint(5, 99, (sum(row),)).tolist(),
                 "position_ids": [position for n in row for position in range(n)]} for row in documents_per_row]
    return CausalLMCollator(PAD)(features)


def step(model, batch: dict) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """The training loss and gradients, and the evaluation logits, of one batch."""
    model.train().zero_grad()
    loss = model(**batch).loss
    loss.backward()
    logits = model.eval()(**batch, return_logits=True).logits
    return loss.detach(), [p.grad.clone() for p in model.parameters()], logits


@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("rows", ([[20, 1, 7, 16], [3, 33, 2]], [[30], [30]]), ids=("packed", "one-per-row"))
@pytest.mark.parametrize("given", ("collate", "packed_sequences", "cu_seq_lens"))
def test_the_collates_boundaries_give_the_outputs_of_the_positions_alone(attn, rows, given):
    """What `CausalLMCollator` adds to packed rows (`packed_sequences`, built on the CPU, and transformers'
    `cu_seq_lens_*` / `max_length_*`), all or either, changes no loss, gradient or logit (bit for bit) from the same
    batch with its `position_ids` alone, whose documents the model reads back; rows that do not restart stay on the
    plain causal path either way."""
    torch.manual_seed(0)
    model = build(attn)
    batch = collated(rows)
    leave_out = {"collate": (), "packed_sequences": VARLEN_KEYWORDS, "cu_seq_lens": ("packed_sequences",)}[given]
    with_boundaries = {key: value for key, value in batch.items() if key not in leave_out}
    positions_alone = {key: batch[key] for key in ("input_ids", "position_ids", "labels")}
    for expected, actual in zip(step(model, positions_alone), step(model, with_boundaries)):
        for e, a in zip(expected if isinstance(expected, list) else [expected],
                        actual if isinstance(actual, list) else [actual]):
            assert torch.equal(a, e)


@pytest.mark.parametrize("rows", ([[20, 1, 7, 16], [3, 33, 2]], [[30], [30]]), ids=("packed", "one-per-row"))
def test_with_the_collates_boundaries_the_training_step_reads_nothing_back(rows):
    """Under sdpa, value checks off (the engine's training forward): no read of any device value, where the same
    batch with `position_ids` alone reads its documents back."""
    model = build("sdpa").train()
    batch = collated(rows)
    counted = {}
    for name, keys in (("collate", batch), ("positions", ("input_ids", "position_ids", "labels"))):
        counter = HostReads()
        with counter, value_checks(False):
            model(**{key: batch[key] for key in keys}).loss.backward()
        counted[name] = sum(counter.reads["setup"].values())
    assert counted["collate"] == 0
    assert counted["positions"] > 0


def test_the_boundaries_are_those_of_transformers_flattening_collator():
    """One packed row: the same `input_ids`, `position_ids`, labels and boundaries (dtypes included) as
    `DataCollatorWithFlattening(return_flash_attn_kwargs=True)` over its documents, and the same loss from either."""
    documents = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]
    theirs = DataCollatorWithFlattening(return_flash_attn_kwargs=True)([{"input_ids": d} for d in documents])
    ours = CausalLMCollator(PAD)([{"input_ids": [t for d in documents for t in d],
                                   "position_ids": [p for d in documents for p in range(len(d))]}])
    for key in ("input_ids", "position_ids", "labels", "cu_seq_lens_q", "cu_seq_lens_k"):
        assert ours[key].dtype == theirs[key].dtype and torch.equal(ours[key], theirs[key]), key
    assert ours["cu_seq_lens_q"].tolist() == [0, 3, 5, 9, 10]
    assert ours["max_length_q"] == ours["max_length_k"] == theirs["max_length_q"] == 4
    assert type(ours["max_length_q"]) is int
    model = build("sdpa").eval()
    torch.testing.assert_close(model(**ours).loss, model(**theirs).loss, rtol=0, atol=0)


def test_packed_sequences_move_with_the_batch_and_keep_their_host_values():
    """Accelerate's `send_to_device` moves the object with the batch (its `to`); its lengths stay on the host; it
    pickles (data loader workers)."""
    batch = collated([[20, 1, 7, 16], [3, 33, 2]])
    check_batch_values(batch, {})
    moved = send_to_device(batch, "meta")
    sequences, before = moved["packed_sequences"], batch["packed_sequences"]
    assert isinstance(sequences, PackedSequences) and sequences is not before
    assert {tensor.device.type for tensor in (sequences.cu_seqlens, sequences.inverse,
                                              *[t for bucket in sequences.buckets for t in bucket])} == {"meta"}
    assert moved["cu_seq_lens_q"].device.type == "meta" and moved["max_length_q"] == before.max_length == 33
    assert sequences.lengths == before.lengths == [20, 1, 7, 16, 3, 33, 2, *[1] * 6]  # a pad: one each
    assert before.cu_seqlens.device.type == "cpu"  # the collate's own object is left as it was
    sent = pickle.loads(pickle.dumps(before))  # from a data loader's worker process
    assert sent.lengths == before.lengths and torch.equal(sent.inverse, before.inverse)


@pytest.mark.parametrize("family", ("gpt", "bert"))
def test_transformers_trainer_trains_on_the_collators_batches(tmp_path, family):
    """transformers' `Trainer` with Lineage's collators: its data loader moves `packed_sequences` with the batch, the
    heads take every key, and training and evaluation give the losses of the same batches without the boundaries."""
    from transformers import Trainer, TrainingArguments

    from modeling import LineageBertForMaskedLM
    from train.data.collators import PaddingCollator

    torch.manual_seed(0)
    if family == "gpt":
        model = build("sdpa")
        rows = [[20, 1, 7, 4], [3, 29], [32], [16, 16]]
        data = [{"input_ids": torch.randint(5, 99, (sum(row),)).tolist(),
                 "position_ids": [p for n in row for p in range(n)]} for row in rows]
        collate = CausalLMCollator(PAD)
    else:
        config = preset("bert-tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        config._attn_implementation = "sdpa"
        model = LineageBertForMaskedLM(config)
        data = [{"input_ids": ids, "labels": [t if i % 3 == 0 else -100 for i, t in enumerate(ids)]}
                for ids in (torch.randint(5, 99, (n,)).tolist() for n in (13, 9, 4, 11))]
        collate = PaddingCollator(type("Tokenizer", (), {"pad_token_id": 0})())
    batch = collate(data)
    assert "packed_sequences" in batch
    plain = {key: value for key, value in batch.items() if key in ("input_ids", "attention_mask", "position_ids",
                                                                   "labels")}
    expected = model.eval()(**plain).loss
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4,
                             per_device_eval_batch_size=4, learning_rate=0.0, logging_steps=1, save_strategy="no",
                             report_to="none", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data, data_collator=collate)
    trainer.train()
    logged = next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)
    assert logged == pytest.approx(expected.item(), abs=1e-4)
    assert trainer.evaluate()["eval_loss"] == pytest.approx(expected.item(), abs=1e-6)


def test_boundaries_of_another_batch_are_refused():
    model = build("sdpa").eval()
    batch, other = collated([[20, 12], [32]]), collated([[10, 6]])
    with pytest.raises(ValueError, match=r"`packed_sequences` describe 16 tokens but `input_ids` holds 2 x 32"):
        model(**{**batch, "packed_sequences": other["packed_sequences"]})
    with pytest.raises(ValueError, match="cu_seq_lens_q, cu_seq_lens_k, max_length_q, max_length_k or none"):
        model(**{key: value for key, value in batch.items() if key not in ("packed_sequences", "max_length_k")})
    with pytest.raises(ValueError, match="`max_length_q` their longest length; got .* and 31"):
        check_batch_values({**batch, "max_length_q": 31}, {})
    with pytest.raises(ValueError, match=r"starts of the sequences of the flattened 64 tokens plus the end"):
        check_batch_values({**other, "input_ids": batch["input_ids"], "packed_sequences": batch["packed_sequences"]},
                           {})


# ------------------------------------------------------------------------------------------- linear memory


class LargestTensor(TorchDispatchMode):
    """The most elements of any tensor an op produced (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


@pytest.mark.parametrize("packed", (False, True), ids=("one-document", "packed"))
def test_sdpa_training_builds_no_tensor_quadratic_in_the_length(packed):
    """Forward and backward at 1024 and 4096 tokens (batch 1): the largest tensor grows with the length (the
    embedding gradient aside), never with its square."""
    config_length = 4096
    model = build("sdpa", max_position_embeddings=config_length).train()
    largest = {}
    for length in (1024, 4096):
        if packed:
            ids, position_ids, _ = packed_rows([[length // 4 - 3, 3, length // 2, length // 4]])
        else:
            ids, position_ids = torch.randint(5, 99, (1, length)), None
        with LargestTensor() as mode:
            model(ids, position_ids=position_ids, labels=ids).loss.backward()
        largest[length] = mode.largest
    assert largest[4096] < length * 64 * 4  # far below 4096^2 (16.8M) elements
    assert largest[4096] <= 4 * largest[1024]


PEAK_MEMORY = textwrap.dedent("""
    import json, os, resource, sys, torch
    sys.path.insert(0, "tests")
    from conftest import preset
    from modeling import LineageGptForCausalLM
    config = preset("gpt-tiny", hidden_size=128, intermediate_size=512, num_attention_heads=8,
                    max_position_embeddings=8192, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config._attn_implementation = "sdpa"
    model = LineageGptForCausalLM(config).train()
    ids = torch.randint(5, 99, (1, 64))
    model(ids, labels=ids).loss.backward()  # warm-up: gradients allocated
    peaks = {}
    for length in map(int, sys.argv[1:]):
        for packed in (False, True):
            ids = torch.randint(5, 99, (1, length))
            positions = torch.cat([torch.arange(length // 2), torch.arange(length - length // 2)])[None]
            read, write = os.pipe()
            if os.fork() == 0:  # a forked child's peak RSS starts at its RSS at the fork: the step's own peak
                start = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
                model(ids, position_ids=positions if packed else None, labels=ids).loss.backward()
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                os.write(write, json.dumps((peak - start) / 2**20).encode())
                os._exit(0)
            os.wait()
            peaks[f"{'packed' if packed else 'one-document'} {length}"] = json.loads(os.read(read, 100))
    print(json.dumps(peaks))
""")


def test_peak_memory_of_a_training_step_grows_linearly():
    """Peak resident memory of a forward + backward (batch 1, sdpa, hidden 128, 8 heads; one document per row, and
    two packed documents), measured in forked processes at 2048 and 8192 tokens: 4x the tokens costs at most about
    4x the memory, where (T, T) attention would cost 16x (measured under eager, which returns the weights: +580 MiB
    at 2048, +8.5 GiB at 8192)."""
    result = subprocess.run([sys.executable, "-c", PEAK_MEMORY, "2048", "8192"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    peaks = json.loads(result.stdout.splitlines()[-1])  # MiB above the RSS before the step
    for kind in ("one-document", "packed"):
        assert peaks[f"{kind} 8192"] < 1024, peaks  # one layer's fp32 scores alone: 8 x 8192^2 x 4 bytes = 2 GiB
        assert peaks[f"{kind} 8192"] < 6 * peaks[f"{kind} 2048"], peaks


def test_packed_rows_train_under_activation_checkpointing():
    """The blocks' `packed_sequences` keyword passes through checkpointed blocks: identical gradients."""
    model = build("sdpa").train()
    ids, position_ids, _ = packed_rows([[20, 12], [5, 27]])
    labels = document_labels(ids, position_ids)
    grads = []
    for checkpointing in (False, True):
        if checkpointing:
            model.activation_checkpointing_enable()
        model.zero_grad()
        model(ids, position_ids=position_ids, labels=labels).loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(layer.gradient_checkpointing for layer in model.transformer.layers)
    for plain, checkpointed in zip(*grads):
        torch.testing.assert_close(checkpointed, plain, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------ on a GPU

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("fp32", "bf16"))
def test_documents_of_a_packed_row_give_their_logits_alone_on_a_gpu(dtype):
    model = build("sdpa").to("cuda", dtype).eval()
    ids, position_ids, documents = packed_rows([[40, 1, 7, 16], [3, 33, 2, 26]])
    logits = model(ids.cuda(), position_ids=position_ids.cuda()).logits.float()
    tolerance = 1e-5 if dtype == torch.float32 else 3e-2
    start = 0
    for document in documents[0]:
        alone = model(document[None].cuda()).logits[0].float()
        torch.testing.assert_close(logits[0, start:start + len(document)], alone, rtol=tolerance, atol=tolerance)
        start += len(document)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("packed", (False, True), ids=("one-document", "packed"))
def test_gpt_124m_trains_at_16384_tokens_on_one_gpu(packed):
    """Part 6 of issue 11: gpt-124m-prenorm (positions raised to 16,384) trains on one 16,384-token row, bf16
    autocast, activation checkpointing, batch 1, within an 80 GB GPU."""
    length = 16384
    config = preset("gpt-124m-prenorm", max_position_embeddings=length)
    config._attn_implementation = "sdpa"
    model = LineageGptForCausalLM(config).cuda().train()
    model.activation_checkpointing_enable()
    ids = torch.randint(0, config.vocab_size, (1, length), device="cuda")
    position_ids = None
    if packed:
        position_ids = torch.cat([torch.arange(n) for n in (5000, 3, 9000, length - 14003)])[None].cuda()
    torch.cuda.reset_peak_memory_stats()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(ids, position_ids=position_ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    peak = torch.cuda.max_memory_allocated() / 2**30
    assert peak < 40, f"peak {peak:.1f} GiB"  # (T, T) fp32 scores of one layer alone: 12 x 16384^2 x 4 B = 12 GiB
