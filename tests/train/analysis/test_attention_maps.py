"""`python -m train.attention_maps`: every family writes the files it promises (decodable PNGs, weights shaped
layers x heads x tokens x tokens whose rows sum to one, tokens, a self-contained page); the cross-attention of
a Transformer trained on digit reversal is anti-diagonal; bad input fails clearly and leaves `--output_dir`
untouched."""

import json
import random
import re
import shlex
import shutil
import subprocess

import matplotlib.image
import numpy as np
import pytest
import torch
import transformers
from conftest import preset
from matplotlib.font_manager import FontProperties, findfont, get_font
from PIL import Image

import modeling
from train import attention_maps
from train.analysis import attention_plots
from train.analysis.attention import AttentionInputError, token_labels
from train.data.corpus import tokenizer_training_texts
from train.data.tokenization import config_kwargs_from_tokenizer, train_tokenizer
from train.run.run_folder import OUTPUT_RECORD, OutputDirError

FAMILIES = {  # kind -> (preset, class, attention kinds written)
    "bert": ("bert-tiny", modeling.LineageBertForSequenceClassification, ("self",)),
    "gpt": ("gpt-tiny", modeling.LineageGptForCausalLM, ("self",)),
    "seq2seq": ("transformer-tiny", modeling.LineageTransformerForConditionalGeneration,
                ("encoder", "decoder", "cross")),
}
TEXT = "seventy-two dogs sleep"


@pytest.fixture(scope="module")
def tokenizers():
    texts = tokenizer_training_texts(size=200)
    return {kind: train_tokenizer(kind, texts, 400, model_max_length=64) for kind in FAMILIES}


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizers):
    """A saved tiny model of every family with its tokenizer."""
    out = {}
    for kind, (name, model_class, _) in FAMILIES.items():
        torch.manual_seed(0)
        model = model_class(preset(name, **config_kwargs_from_tokenizer(tokenizers[kind], kind)))
        out[kind] = tmp_path_factory.mktemp(kind)
        model.save_pretrained(out[kind])
        tokenizers[kind].save_pretrained(out[kind])
    return out


def run(folder, out, *extra) -> dict:
    return attention_maps.main(["--model", str(folder), "--text", TEXT, "--output_dir", str(out), *extra])


def check_weights(weights: np.ndarray, layers: int, heads: int, rows: int, columns: int) -> None:
    assert weights.shape == (layers, heads, rows, columns) and weights.dtype == np.float32
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert (weights >= 0).all()


@pytest.mark.parametrize("kind", list(FAMILIES))
def test_every_family_writes_pictures_weights_tokens_and_a_page(kind, folders, tokenizers, tmp_path, capsys):
    extra = ["--text_pair", "a cat is awake"] if kind == "bert" else []
    files = run(folders[kind], tmp_path / "maps", *extra)
    assert "switched the attention kernel from sdpa to eager" in capsys.readouterr().out
    out = tmp_path / "maps"
    written = sorted(p.name for group in files.values() for p in group)
    assert sorted(p.name for p in out.iterdir() if p.name != OUTPUT_RECORD) == written
    for png in files["png"]:
        image = matplotlib.image.imread(png)
        assert image.ndim == 3 and min(image.shape[:2]) > 100
    index = json.loads((out / "tokens.json").read_text())
    config = json.loads((folders[kind] / "config.json").read_text())
    assert set(index["maps"]) == set(FAMILIES[kind][2])
    for name, entry in index["maps"].items():
        rows, columns = index["tokens"][entry["rows"]], index["tokens"][entry["columns"]]
        check_weights(np.load(out / entry["file"]), config["num_hidden_layers"], config["num_attention_heads"],
                      len(rows), len(columns))
        assert (out / f"{name}_grid.png").is_file() and (out / f"{name}_layer1.png").is_file()
    first = index["tokens"]["source" if kind == "seq2seq" else "input"]
    pair = (TEXT, "a cat is awake") if kind == "bert" else (TEXT,)
    plain = kind == "gpt"  # a causal LM reads plain text, as pretrained
    ids = tokenizers[kind](*pair, add_special_tokens=not plain)["input_ids"]
    assert first == tokenizers[kind].convert_ids_to_tokens(ids)
    if kind == "seq2seq":  # no --target: the model's own output, then forced
        assert index["target_generated"] and index["tokens"]["decoder_input"][0] == "<s>"
        assert index["tokens"]["decoder_input"][1:] == index["tokens"]["target"][:-1]
    html = (out / "attention.html").read_text()
    assert not re.search(r"(src|href)=\"?https?:", html) and "<script>" in html


def test_a_seq2seq_target_given_is_forced(folders, tokenizers, tmp_path):
    run(folders["seq2seq"], tmp_path / "forced", "--target", "zweiundsiebzig")
    forced = json.loads((tmp_path / "forced" / "tokens.json").read_text())
    labels = tokenizers["seq2seq"](text_target="zweiundsiebzig")["input_ids"]
    assert not forced["target_generated"]
    assert forced["tokens"]["target"] == tokenizers["seq2seq"].convert_ids_to_tokens(labels)
    assert (tmp_path / "forced" / "cross_layer0_mean.png").is_file()
    assert np.load(tmp_path / "forced" / "cross.npy").shape[2:] == (len(labels), len(forced["tokens"]["source"]))


def test_layers_and_heads_select_slices_of_the_full_maps(folders, tmp_path):
    run(folders["gpt"], tmp_path / "all")
    run(folders["gpt"], tmp_path / "some", "--layers", "1", "--heads", "0,2")
    full, some = np.load(tmp_path / "all" / "self.npy"), np.load(tmp_path / "some" / "self.npy")
    np.testing.assert_array_equal(some, full[1:2][:, [0, 2]])
    index = json.loads((tmp_path / "some" / "tokens.json").read_text())
    assert index["maps"]["self"]["layers"] == [1] and index["maps"]["self"]["heads"] == [0, 2]
    assert not (tmp_path / "some" / "self_layer0.png").exists()


def test_the_page_embeds_the_weights(folders, tmp_path):
    run(folders["bert"], tmp_path / "maps")
    html = (tmp_path / "maps" / "attention.html").read_text()
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.DOTALL).group(1))
    np.testing.assert_allclose(np.array(data["kinds"][0]["weights"]), np.load(tmp_path / "maps" / "self.npy"),
                               atol=1e-4)
    assert data["labels"]["input"] == json.loads((tmp_path / "maps" / "tokens.json").read_text())["labels"]["input"]


def test_a_reference_model_folder_is_converted_and_gives_its_own_attention(tokenizers, tmp_path, capsys):
    tokenizer = tokenizers["bert"]
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=37, max_position_embeddings=64,
                                     attn_implementation="eager")
    reference = transformers.BertForMaskedLM(config).eval()
    reference.save_pretrained(tmp_path / "reference")
    tokenizer.save_pretrained(tmp_path / "reference")
    run(tmp_path / "reference", tmp_path / "maps")
    assert "a transformers `BertForMaskedLM` converted to Lineage" in capsys.readouterr().out
    with torch.no_grad():
        expected = reference(**tokenizer(TEXT, return_tensors="pt"), output_attentions=True).attentions
    np.testing.assert_allclose(np.load(tmp_path / "maps" / "self.npy"), torch.cat(expected).numpy(), atol=1e-5)


@pytest.mark.parametrize("attention", ["bahdanau", "luong-general"])
def test_an_attentional_rnn_gives_its_alignment(tokenizers, tmp_path, attention):
    tokenizer = tokenizers["seq2seq"]
    config = preset("rnn-tiny", **config_kwargs_from_tokenizer(tokenizer, "seq2seq"), attention=attention)
    modeling.LineageRnnForConditionalGeneration(config).save_pretrained(tmp_path / "rnn")
    tokenizer.save_pretrained(tmp_path / "rnn")
    run(tmp_path / "rnn", tmp_path / "maps", "--target", "zweiundsiebzig")
    index = json.loads((tmp_path / "maps" / "tokens.json").read_text())
    assert list(index["maps"]) == ["cross"]  # no self-attention in an RNN
    check_weights(np.load(tmp_path / "maps" / "cross.npy"), 1, 1, len(index["tokens"]["target"]),
                  len(index["tokens"]["source"]))
    assert sorted(p.name for p in (tmp_path / "maps").glob("*.png")) == ["cross_grid.png", "cross_layer0_mean.png"]


def test_a_generation_length_the_decoder_cannot_take_is_refused_by_name(folders, tmp_path):
    """A length past the decoder's positions failed inside generate() with a traceback (0 or below is a usage error,
    tests/train/test_cli.py)."""
    with pytest.raises(AttentionInputError, match="--max_new_tokens is 500, but the decoder has 64 positions, one of "
                                                  "them for its start token: give at most 63"):
        run(folders["seq2seq"], tmp_path / "maps", "--max_new_tokens", "500")
    assert_nothing_written(tmp_path, tmp_path / "maps")


def test_a_model_without_attention_is_refused(tokenizers, tmp_path):
    tokenizer = tokenizers["seq2seq"]
    config = preset("rnn-tiny", **config_kwargs_from_tokenizer(tokenizer, "seq2seq"), attention="none")
    modeling.LineageRnnForConditionalGeneration(config).save_pretrained(tmp_path / "rnn")
    tokenizer.save_pretrained(tmp_path / "rnn")
    with pytest.raises(AttentionInputError, match="returned no attention weights"):
        run(tmp_path / "rnn", tmp_path / "maps", "--target", "zwei")
    assert_nothing_written(tmp_path, tmp_path / "maps")


_DOM_STUB = """
const els = {};
const ctx = new Proxy({}, {get: (t, k) => (k in t ? t[k] : () => {}), set: (t, k, v) => { t[k] = v; return true; }});
const document = {getElementById: (id) => els[id] || (els[id] = {value: "0", innerHTML: "", getContext: () => ctx,
  textContent: id === "data" ? DATA : ""})};
"""
_DOM_EVENTS = """
els.kind.value = "2"; els.kind.onchange(); els.layer.value = "1"; els.layer.onchange();
els.head.value = String(els.head.innerHTML.split("<option").length - 2); els.head.onchange();
els.matrix.onmousemove({offsetX: 111, offsetY: 111});
console.log(JSON.stringify({info: els.info.textContent, text: els.text.innerHTML}));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the page's script")
def test_the_page_script_picks_kind_layer_mean_of_heads_and_reads_a_cell(folders, tmp_path):
    run(folders["seq2seq"], tmp_path / "maps", "--target", "zwei")
    html = (tmp_path / "maps" / "attention.html").read_text()
    data = re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.DOTALL).group(1)
    script = re.search(r"<script>(.*?)</script>", html, re.DOTALL).group(1)
    (tmp_path / "page.js").write_text(f"const DATA = {json.dumps(data)};{_DOM_STUB}{script}{_DOM_EVENTS}")
    shown = json.loads(subprocess.run(["node", str(tmp_path / "page.js")], capture_output=True, text=True,
                                      check=True, timeout=60).stdout)
    mean = np.load(tmp_path / "maps" / "cross.npy")[1].mean(axis=0)  # layer 1, mean of heads
    tokens = json.loads((tmp_path / "maps" / "tokens.json").read_text())["labels"]
    cell, value = shown["info"].rsplit(": ", 1)
    assert cell == f"{tokens['target'][0]} (row 0) -> {tokens['source'][0]} (column 0)"
    assert abs(float(value) - mean[0, 0]) < 2e-4  # the page holds weights to 4 decimals
    assert shown["text"].count("<span") == len(tokens["source"]) + 1


def test_long_inputs_get_fewer_smaller_labels():
    assert attention_plots.font_size(8) > attention_plots.font_size(60)
    assert attention_plots.tick_positions(40) == list(range(40))
    for count in (65, 500, 4000):
        shown = attention_plots.tick_positions(count)
        assert len(shown) <= attention_plots.MAX_TICKS and shown[0] == 0 and count - shown[-1] <= count / len(shown) + 1
    assert attention_plots.display_tokens(["word", "x" * 40]) == ["word", "x" * 13 + "…"]
    for count, marked in ((40, [5]), (129, [0, 64, 128]), (512, [0, 255, 256, 511])):  # [CLS] a [SEP] b [SEP]
        shown, stride = attention_plots.tick_positions(count, marked), -(-count // attention_plots.MAX_TICKS)
        assert set(marked) <= set(shown) and shown == sorted(set(shown)) and len(shown) <= attention_plots.MAX_TICKS
        gaps = [b - a for a, b in zip(shown, shown[1:]) if not {a, b} <= set(marked)]
        assert min(gaps) >= stride  # a special token takes the place of its neighbours: the labels keep their room


def test_labels_read_as_the_text_and_the_figures_draw_what_their_font_has(folders, tokenizers, tmp_path):
    text = "Anna café 東京 🙂 sleeps"
    for kind, tokenizer in tokenizers.items():
        ids = tokenizer(text)["input_ids"]
        labels = token_labels(tokenizer, ids)
        assert len(labels) == len(ids)
        if kind == "gpt":  # byte-level BPE: every character is in the vocabulary, some split over pieces
            pieces = [re.fullmatch(r"(.+) (\d)/(\d)", label) for label in labels]
            whole = [m.group(1) for m in pieces if m and m.group(2) == m.group(3)]
            assert {"é", "東", "京", "🙂"} <= set(whole)  # a character's last piece, numbered n/n
            read = "".join(m.group(1) if m else label for m, label in zip(pieces, labels, strict=True)
                           if not m or m.group(2) == m.group(3))
            assert read.replace("Ġ", "") == "[START]" + text.replace(" ", "") + "[EXTRACT]"
    run(folders["gpt"], tmp_path / "maps", "--text", text)
    index = json.loads((tmp_path / "maps" / "tokens.json").read_text())
    ids = tokenizers["gpt"](text, add_special_tokens=False)["input_ids"]
    assert index["tokens"]["input"] == tokenizers["gpt"].convert_ids_to_tokens(ids)  # the vocabulary's entries
    assert index["labels"]["input"] == token_labels(tokenizers["gpt"], ids)
    drawn = attention_plots.display_tokens(["東 1/3", "🙂", "é"])
    font = get_font(findfont(FontProperties()))
    assert all(font.get_char_index(ord(c)) for label in drawn for c in label if not c.isspace())
    assert drawn[2] == "é" and re.fullmatch(r"(東|U\+6771) 1/3", drawn[0])


def test_every_file_says_how_it_was_made(folders, tmp_path):
    argv = ["--model", str(folders["seq2seq"]), "--text", TEXT, "--output_dir", str(tmp_path / "maps")]
    files = attention_maps.main(argv)
    index = json.loads((tmp_path / "maps" / "tokens.json").read_text())
    assert index["command"] == shlex.join(["lineage", "attention-maps", *argv])
    assert index["versions"]["torch"] == torch.__version__
    assert index["versions"]["transformers"] == transformers.__version__
    for png in files["png"]:
        with Image.open(png) as image:
            assert image.text["Source"] == index["command"] and image.text["Title"]


# ----------------------------------------------------------------------------------------------------------
# The learned alignment: digit reversal
# ----------------------------------------------------------------------------------------------------------


def train_reversal(folder, lengths: tuple[int, int], layers: int, heads: int, steps: int) -> None:
    """A tiny Transformer trained to reverse digit sequences, saved with its tokenizer."""
    rng = random.Random(0)

    def digits(n: int) -> str:
        return " ".join(rng.choice("0123456789") for _ in range(n))

    tokenizer = train_tokenizer("seq2seq", [digits(9) for _ in range(300)], 30, model_max_length=32)
    config = preset("transformer-tiny", **config_kwargs_from_tokenizer(tokenizer, "seq2seq"), num_hidden_layers=layers,
                    num_attention_heads=heads, hidden_dropout_prob=0.0, label_smoothing=0.0)
    model = modeling.LineageTransformerForConditionalGeneration(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        sources = [digits(rng.randint(*lengths)) for _ in range(32)]
        batch = tokenizer(sources, text_target=[" ".join(s.split()[::-1]) for s in sources], padding=True,
                          return_tensors="pt")
        batch["labels"][batch["labels"] == tokenizer.pad_token_id] = -100
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def check_anti_diagonal(folder, out, digits: str) -> None:
    """The generated target is the reversal, and each target digit attends most (averaged over the heads of the
    last layer) to the source digit it copies, with most of the weight."""
    attention_maps.main(["--model", str(folder), "--text", digits, "--output_dir", str(out)])
    index = json.loads((out / "tokens.json").read_text())
    n = len(digits.split())
    assert [t.strip("▁") for t in index["tokens"]["target"]] == digits.split()[::-1] + ["</s>"]
    alignment = np.load(out / "cross.npy")[-1].mean(axis=0)[:n, :n]  # (target digits, source digits)
    assert alignment.argmax(axis=1).tolist() == list(range(n - 1, -1, -1))
    assert np.fliplr(alignment).diagonal().mean() > 0.5


def test_cross_attention_learned_on_digit_reversal_is_anti_diagonal(tmp_path):
    train_reversal(tmp_path / "model", lengths=(6, 6), layers=1, heads=2, steps=600)
    check_anti_diagonal(tmp_path / "model", tmp_path / "maps", "3 1 4 1 5 9")


@pytest.mark.slow
def test_cross_attention_on_reversal_of_varying_lengths_is_anti_diagonal(tmp_path):
    train_reversal(tmp_path / "model", lengths=(4, 9), layers=2, heads=4, steps=1500)
    for digits in ("2 7 1 8", "3 1 4 1 5 9 2", "9 8 7 6 5 4 3 2 1"):
        check_anti_diagonal(tmp_path / "model", tmp_path / f"maps-{len(digits)}", digits)


# ----------------------------------------------------------------------------------------------------------
# Bad input: clear errors, nothing written
# ----------------------------------------------------------------------------------------------------------


def assert_nothing_written(parent, out) -> None:
    assert not out.exists() and not [p for p in parent.iterdir() if p.name.startswith(f".{out.name}")]


def test_a_folder_that_is_no_supported_model_is_refused(tmp_path):
    transformers.ElectraConfig(architectures=["ElectraModel"]).save_pretrained(tmp_path / "electra")
    with pytest.raises(AttentionInputError, match=r"ElectraModel.*transformers classes BertForMaskedLM"):
        run(tmp_path / "electra", tmp_path / "maps")
    with pytest.raises(AttentionInputError, match="--model .*missing"):
        run(tmp_path / "missing", tmp_path / "maps")
    assert_nothing_written(tmp_path, tmp_path / "maps")


@pytest.mark.parametrize("flag, value, message", [
    ("--layers", "0,2", r"--layers 2 out of range: the self attention has 2 layers \(0-1\)"),
    ("--heads", "4", r"--heads 4 out of range: the self attention has 4 heads \(0-3\)"),
])
def test_layer_or_head_out_of_range_is_refused(folders, tmp_path, flag, value, message):
    with pytest.raises(AttentionInputError, match=message):
        run(folders["bert"], tmp_path / "maps", flag, value)
    assert_nothing_written(tmp_path, tmp_path / "maps")


@pytest.mark.parametrize("flag, value, message", [
    ("--layers", "0,0", "argument --layers: expected each index once, got '0,0'"),
    ("--heads", "1,-1", "argument --heads: indices count from 0, got '1,-1'"),
    ("--heads", "1,x", "argument --heads: expected indices separated by commas such as 0,2, got '1,x'"),
])
def test_a_list_of_indices_that_is_no_set_of_indices_is_refused(folders, tmp_path, capsys, flag, value, message):
    """(before: `--layers 0,0` wrote layer 0 twice into self.npy and tokens.json, and counted its PNG twice)"""
    with pytest.raises(SystemExit):
        run(folders["bert"], tmp_path / "maps", flag, value)
    assert message in capsys.readouterr().err
    assert_nothing_written(tmp_path, tmp_path / "maps")


@pytest.mark.parametrize("arguments, message", [
    (["--text", "  "], "--text is empty"),
    (["--text", "a", "--target", ""], "--target is empty"),
    (["--text", "a", "--text_pair", "b"], "--text_pair is for BERT / GPT"),
])
def test_empty_or_misplaced_text_is_refused(folders, tmp_path, arguments, message):
    with pytest.raises(AttentionInputError, match=message):
        attention_maps.main(["--model", str(folders["seq2seq"]), *arguments, "--output_dir", str(tmp_path / "maps")])
    assert_nothing_written(tmp_path, tmp_path / "maps")


def test_a_target_for_an_encoder_is_refused(folders, tmp_path):
    with pytest.raises(AttentionInputError, match="--target.*sequence-to-sequence models"):
        run(folders["bert"], tmp_path / "maps", "--target", "x")


def test_text_longer_than_the_positions_is_truncated_with_a_warning(folders, tmp_path, capfd, caplog):
    """One warning, the command's (before: transformers' too, past the tokenizer's limit, foretelling 'indexing
    errors' that truncation prevents)."""
    text = " ".join(["seventy-two dogs"] * 80)
    with pytest.warns(UserWarning, match=r"--text is \d+ tokens long, more than the model's 64 positions; truncated"):
        attention_maps.main(["--model", str(folders["bert"]), "--text", text, "--output_dir", str(tmp_path / "maps"),
                             "--layers", "0", "--heads", "0"])
    assert np.load(tmp_path / "maps" / "self.npy").shape == (1, 1, 64, 64)
    assert "indexing errors" not in capfd.readouterr().err + caplog.text


def test_an_out_folder_of_other_files_is_refused_even_with_overwrite_and_kept(folders, tmp_path):
    out = tmp_path / "maps"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    for flags in ((), ("--overwrite_output_dir",)):
        with pytest.raises(OutputDirError, match=r"holds mine.txt, which attention-maps did not write there"):
            run(folders["gpt"], out, *flags)
        assert [p.name for p in out.iterdir()] == ["mine.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["maps"]


def test_an_earlier_output_is_replaced_only_with_overwrite(folders, tmp_path):
    out = tmp_path / "maps"
    run(folders["gpt"], out)
    with pytest.raises(OutputDirError, match="holds an earlier output of attention-maps; .* "
                                             "--overwrite_output_dir"):
        run(folders["gpt"], out)
    run(folders["bert"], out, "--overwrite_output_dir")
    assert json.loads((out / "tokens.json").read_text())["model"] == str(folders["bert"])
    assert [p.name for p in tmp_path.iterdir()] == ["maps"]


def test_bertviz_views_are_written_only_when_bertviz_is_installed(folders, tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "bertviz", None)  # as if not installed
    files = run(folders["seq2seq"], tmp_path / "without", "--target", "zwei", "--layers", "0", "--heads", "0")
    assert [p.name for p in files["html"]] == ["attention.html"]
    monkeypatch.undo()
    pytest.importorskip("bertviz")
    files = run(folders["seq2seq"], tmp_path / "with", "--target", "zwei", "--layers", "0", "--heads", "0")
    assert {p.name for p in files["html"]} == {"attention.html", "bertviz_head_view.html", "bertviz_model_view.html"}
