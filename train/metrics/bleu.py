"""Corpus BLEU through sacrebleu (offline twin of the Hub `sacrebleu` metric): score 0-100, with the sacreBLEU signature
(`nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...`) that makes the figure comparable (Post, 2018)."""

import datasets
import evaluate
from sacrebleu.metrics import BLEU

from train.metrics.references import reference_streams


class Bleu(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="sacreBLEU corpus score (13a tokenization by default).",
            citation="Post, 2018. A Call for Clarity in Reporting BLEU Scores.",
            inputs_description="predictions: list of str; references: list of list of str (one or more per prediction)",
            features=datasets.Features({"predictions": datasets.Value("string"),
                                        "references": datasets.Sequence(datasets.Value("string"))}),
        )

    def _compute(self, predictions, references, tokenize="13a", lowercase=False):
        streams = reference_streams("bleu", predictions, references)
        metric = BLEU(tokenize=tokenize, lowercase=lowercase)
        result = metric.corpus_score(predictions, streams)
        exact = sum(int(p.strip() == r[0].strip()) for p, r in zip(predictions, references)) / len(predictions)
        return {"bleu": result.score, "precisions": result.precisions, "brevity_penalty": result.bp,
                "exact_match": exact, "signature": str(metric.get_signature())}
