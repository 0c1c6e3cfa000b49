"""Corpus chrF through sacrebleu (offline twin of the Hub `chrf` metric): score 0-100 with its sacreBLEU signature.

Popović, 2015 (character n-grams up to 6, beta 2); `word_order=2` gives chrF++ (Popović, 2017). The signature
(`nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:...`) is what makes the figure comparable across papers.
"""

import datasets
import evaluate
from sacrebleu.metrics import CHRF

from train.metrics.references import reference_streams


class Chrf(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="sacreBLEU corpus chrF (character n-gram F-score), with its signature.",
            citation="Popović, 2015. chrF: character n-gram F-score for automatic MT evaluation.",
            inputs_description="predictions: list of str; references: list of list of str (one or more per prediction)",
            features=datasets.Features({"predictions": datasets.Value("string"),
                                        "references": datasets.Sequence(datasets.Value("string"))}),
        )

    def _compute(self, predictions, references, char_order=6, word_order=0, beta=2, lowercase=False):
        streams = reference_streams("chrf", predictions, references)
        metric = CHRF(char_order=char_order, word_order=word_order, beta=beta, lowercase=lowercase)
        result = metric.corpus_score(predictions, streams)
        return {"chrf": result.score, "signature": str(metric.get_signature())}
