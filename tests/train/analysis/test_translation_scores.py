"""`train.analysis.translation_scores` and the chrf metric: corpus sacreBLEU and chrF as sacrebleu computes them, each
with sacrebleu's own signature; `train_translation` reports both, and the beam search that made them, in its log,
`results.json` and card, and hands `length_penalty` to `generate`."""

import json

import pytest
import sacrebleu
from hypothesis import given, settings
from hypothesis import strategies as st
from sacrebleu.metrics import BLEU, CHRF

from train import train_translation
from train.analysis.translation_scores import score_translations
from train.metrics import load_metric
from train.run.publish import read_card_metadata

EXAMPLES = settings(max_examples=25, deadline=None, database=None, derandomize=True)
WORDS = st.lists(st.sampled_from("Ich habe zwei Katzen . the cat sat on a mat ,".split()), min_size=1,
                 max_size=10).map(" ".join)


@EXAMPLES
@given(data=st.data(), count=st.integers(1, 6))
def test_scores_are_sacrebleus_corpus_figures_with_its_signatures(data, count):
    hypotheses = data.draw(st.lists(WORDS, min_size=count, max_size=count))
    references = data.draw(st.lists(WORDS, min_size=count, max_size=count))
    scores = score_translations(hypotheses, references)
    bleu, chrf = BLEU(), CHRF()
    assert scores["bleu"] == pytest.approx(bleu.corpus_score(hypotheses, [references]).score)
    assert scores["chrf"] == pytest.approx(chrf.corpus_score(hypotheses, [references]).score)
    assert scores["bleu_signature"] == str(bleu.get_signature())
    assert scores["chrf_signature"] == str(chrf.get_signature())
    assert scores["exact_match"] == sum(h == r for h, r in zip(hypotheses, references)) / count


def test_signatures_name_the_tokenization_and_the_sacrebleu_release():
    scores = score_translations(["Ich habe zwei Katzen."], ["Ich habe drei Katzen."])
    fields = dict(part.split(":") for part in scores["bleu_signature"].split("|"))
    assert fields["tok"] == "13a" and fields["nrefs"] == "1" and fields["version"] == sacrebleu.__version__
    assert dict(part.split(":") for part in scores["chrf_signature"].split("|"))["nc"] == "6"


def test_chrf_refuses_empty_and_ragged_references():
    chrf = load_metric("chrf")
    with pytest.raises(ValueError, match="predictions and references are empty"):
        chrf.compute(predictions=[], references=[])
    with pytest.raises(ValueError, match="references holds an empty list"):
        chrf.compute(predictions=["a b"], references=[[]])
    with pytest.raises(ValueError, match="references holds lists of 1, 2 references"):
        chrf.compute(predictions=["a b", "c"], references=[["a b"], ["c", "d"]])


@pytest.fixture
def generate_calls(monkeypatch) -> list[dict]:
    """The keywords of every `generate()` call of a Transformer, made as usual."""
    from modeling import LineageTransformerForConditionalGeneration

    calls, generate = [], LineageTransformerForConditionalGeneration.generate

    def spy(self, *args, **kwargs):
        calls.append(kwargs)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(LineageTransformerForConditionalGeneration, "generate", spy)
    return calls


def test_translation_run_records_scores_signatures_and_beam_settings(tmp_path, generate_calls):
    results, folder = train_translation.main([
        "--recipe", "transformer-translation-tiny", "--output_dir", str(tmp_path / "mt"), "--progress_bar", "false",
        "--max_steps", "2", "--save_steps", "0", "--eval_size", "8", "--num_beams", "3", "--length_penalty", "0.6",
        "--max_new_tokens", "8"])
    assert generate_calls and all(c["num_beams"] == 3 and c["length_penalty"] == 0.6 for c in generate_calls)
    written = json.loads((folder / "results.json").read_text())
    for key in ("eval_bleu", "eval_chrf", "eval_bleu_signature", "eval_chrf_signature", "num_beams",
                "length_penalty"):
        assert written[key] == results[key]
    assert written["num_beams"] == 3 and written["length_penalty"] == 0.6
    assert "tok:13a" in written["eval_bleu_signature"] and "nc:6" in written["eval_chrf_signature"]
    logged = [json.loads(line) for line in (tmp_path / "mt" / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert logged[-1]["eval_chrf_signature"] == written["eval_chrf_signature"]
    card = (folder / "README.md").read_text().replace("\\|", "|")  # a table cell escapes the signature's bars
    assert written["eval_bleu_signature"] in card and "| length_penalty | 0.6000 |" in card
    reached = {m["type"]: m["value"] for m in read_card_metadata(folder / "README.md")["model-index"][0]["results"][0]
               ["metrics"]}
    assert reached["chrf"] == pytest.approx(written["eval_chrf"], abs=1e-4)


def test_a_translation_run_decodes_as_the_paper_with_beam_search_gnmt(tmp_path, generate_calls):
    from modeling.beam_search import gnmt_beam_search

    results, folder = train_translation.main([
        "--recipe", "transformer-translation-tiny", "--output_dir", str(tmp_path / "mt"), "--progress_bar", "false",
        "--max_steps", "2", "--save_steps", "0", "--eval_size", "8", "--beam_search", "gnmt", "--length_penalty",
        "0.6", "--max_new_tokens", "8"])
    assert generate_calls and all(c["custom_generate"] is gnmt_beam_search and c["length_penalty"] == 0.6
                                  for c in generate_calls)
    assert json.loads((folder / "results.json").read_text())["beam_search"] == results["beam_search"] == "gnmt"
    assert "beam_search: gnmt" in (folder / "recipe.yaml").read_text()
