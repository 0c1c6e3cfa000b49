"""Pipelines that transformers 5 no longer ships, for Lineage models: translation, text2text generation and
extractive question answering.

`save_pretrained` writes a `custom_pipelines` entry for each task a head serves (`custom_pipelines_for`) and copies
this file beside the model code, so that `pipeline("translation", model=folder, trust_remote_code=True)` works in
any process. Generation parameters pass through to `generate()` (at most 256 new tokens by default); question
answering follows BERT's SQuAD procedure (section 4.2) as transformers 4's pipeline did (docs/using.md).
"""

from __future__ import annotations

import copy
import math
import numbers

import torch
from transformers.pipelines.base import ChunkPipeline, Pipeline

_DEFAULT_MAX_NEW_TOKENS = 256
_DEFAULT_MAX_QUESTION_LEN = 64  # transformers 4's and BERT's run_squad.py's
# the Auto class a head is registered under -> {task: pipeline class name}
PIPELINES_BY_AUTO_CLASS = {
    "AutoModelForSeq2SeqLM": {"translation": "LineageTranslationPipeline",
                              "text2text-generation": "LineageText2TextGenerationPipeline"},
    "AutoModelForQuestionAnswering": {"question-answering": "LineageQuestionAnsweringPipeline"},
}
# the Auto class a head is registered under -> the transformers pipelines it serves
_TRANSFORMERS_TASKS = {
    "AutoModel": ("feature-extraction",),
    "AutoModelForMaskedLM": ("fill-mask",),
    "AutoModelForSequenceClassification": ("text-classification", "zero-shot-classification"),
    "AutoModelForTokenClassification": ("token-classification",),
    "AutoModelForCausalLM": ("text-generation",),
}


def custom_pipelines_for(auto_class: str) -> dict[str, dict]:
    """The `custom_pipelines` entries of config.json for a head registered under `auto_class` (none if it has none)."""
    module = __name__.rsplit(".", 1)[-1]
    return {task: {"impl": f"{module}.{name}", "pt": [auto_class], "type": "text"}
            for task, name in PIPELINES_BY_AUTO_CLASS.get(auto_class, {}).items()}


def served_tasks(model) -> str:
    """The pipeline tasks a model serves, in words ("LineageBertForMaskedLM serves fill-mask"), for the refusals."""
    auto_class = model.auto_class_name() if hasattr(model, "auto_class_name") else None
    tasks = [*_TRANSFORMERS_TASKS.get(auto_class, ()), *PIPELINES_BY_AUTO_CLASS.get(auto_class, {})]
    listed = " and ".join([", ".join(tasks[:-1]), tasks[-1]] if len(tasks) > 1 else tasks) or "no pipeline task"
    return f"{type(model).__name__} serves {listed}"


def _padding_on_the_right(tokenizer):
    """`tokenizer`, or a copy of it that pads on the right: a pipeline batches its inputs on the tokenizer's padding
    side, and the encoders number their positions from the first slot (a tokenizer that served a text-generation
    pipeline pads on the left). The caller's tokenizer is left as it is."""
    if tokenizer is None or tokenizer.padding_side == "right":
        return tokenizer
    tokenizer = copy.copy(tokenizer)
    tokenizer.padding_side = "right"
    return tokenizer


# ----------------------------------------------------------------------------------------------------------
# Translation and text2text generation
# ----------------------------------------------------------------------------------------------------------


class LineageText2TextGenerationPipeline(Pipeline):
    """Text in, generated text out, through an encoder-decoder's `generate()`: `{"generated_text": ...}` per
    returned sequence (`num_return_sequences`, default 1)."""

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _pipeline_calls_generate = True
    return_name = "generated"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tokenizer = _padding_on_the_right(self.tokenizer)
        if not getattr(self.model.config, "is_encoder_decoder", False) or not self.model.can_generate():
            raise ValueError(f"the {self.task or 'text2text-generation'} pipeline needs an encoder-decoder model that "
                             "generates: a Lineage Transformer or RNN (LineageTransformerForConditionalGeneration or "
                             "LineageRnnForConditionalGeneration, as train_translation saves them); "
                             f"{served_tasks(self.model)}")

    def _sanitize_parameters(self, truncation: bool | None = None, return_tensors: bool | None = None,
                             clean_up_tokenization_spaces: bool | None = None, **generate_kwargs):
        preprocess = {} if truncation is None else {"truncation": truncation}
        postprocess = {key: value for key, value in (("return_tensors", return_tensors),
                                                     ("clean_up_tokenization_spaces", clean_up_tokenization_spaces))
                       if value is not None}
        return preprocess, generate_kwargs, postprocess

    def preprocess(self, text: str, truncation: bool = True):
        if not isinstance(text, str):
            raise ValueError(f"the {self.task or 'text2text-generation'} pipeline takes a string or a list of "
                             f"strings, got {type(text).__name__}")
        return self.tokenizer(text, return_tensors="pt", truncation=truncation)

    def _length_default(self, generate_kwargs: dict) -> dict:
        """`max_new_tokens` when neither the call nor the model's generation config sets a length: 256, or one
        less than the decoder's positions."""
        set_params = self._get_set_generation_params(generate_kwargs)
        if "max_new_tokens" in set_params or "max_length" in set_params:
            return {}
        positions = getattr(self.model.config, "max_position_embeddings", None) or _DEFAULT_MAX_NEW_TOKENS + 1
        return {"max_new_tokens": min(_DEFAULT_MAX_NEW_TOKENS, positions - 1)}

    def _forward(self, model_inputs: dict, **generate_kwargs) -> dict:
        batch = model_inputs["input_ids"].shape[0]
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        generate_kwargs.update(self._length_default(generate_kwargs))
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)  # (B * returned, L)
        return {"output_ids": output_ids.reshape(batch, output_ids.shape[0] // batch, -1)}  # (B, returned, L)

    def postprocess(self, model_outputs: dict, return_tensors: bool = False,
                    clean_up_tokenization_spaces: bool = False) -> list[dict]:
        if return_tensors:
            return [{f"{self.return_name}_token_ids": ids} for ids in model_outputs["output_ids"][0]]
        return [{f"{self.return_name}_text": self.tokenizer.decode(
            ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces)}
            for ids in model_outputs["output_ids"][0]]

    def __call__(self, inputs: str | list[str], **kwargs):
        """One list of results per input; a list of inputs with one result each gives one result per input."""
        results = super().__call__(inputs, **kwargs)
        if isinstance(inputs, list) and all(len(result) == 1 for result in results):
            return [result[0] for result in results]
        return results


class LineageTranslationPipeline(LineageText2TextGenerationPipeline):
    """`LineageText2TextGenerationPipeline` whose results read `{"translation_text": ...}`. The language pair is
    the model's: Lineage translators are trained on one direction."""

    return_name = "translation"


# ----------------------------------------------------------------------------------------------------------
# Extractive question answering
# ----------------------------------------------------------------------------------------------------------


def _qa_inputs(args: tuple, kwargs: dict) -> dict | list[dict]:
    """`(question=, context=)` (strings or equal-length lists), a `{"question", "context"}` dict or a list of
    them, as one dict or a list of dicts."""
    if args and ("question" in kwargs or "context" in kwargs):
        raise ValueError("pass either a {'question', 'context'} dict (or a list of them) or question= and context=")
    if args:
        inputs = args[0]
    elif "question" in kwargs and "context" in kwargs:
        question, context = kwargs.pop("question"), kwargs.pop("context")
        if isinstance(question, list) != isinstance(context, list) or (
                isinstance(question, list) and len(question) != len(context)):
            raise ValueError("`question` and `context` must both be strings or lists of the same length")
        inputs = ([{"question": q, "context": c} for q, c in zip(question, context)] if isinstance(question, list)
                  else {"question": question, "context": context})
    else:
        raise ValueError("the question-answering pipeline needs question= and context=")
    for item in inputs if isinstance(inputs, list) else [inputs]:
        if not isinstance(item, dict) or not isinstance(item.get("question"), str) or not isinstance(
                item.get("context"), str) or not item["context"].strip():
            raise ValueError(f"each input must be a dict with a string 'question' and a non-empty string 'context', "
                             f"got {item!r}")
    return inputs


def _word_offsets(offsets: list, word_ids: list, sequence_ids: list) -> list:
    """Each context token's character span widened to its whole word (within the window), so that an answer
    never starts or ends inside a word."""
    spans = {}
    for (begin, end), word, sequence in zip(offsets, word_ids, sequence_ids):
        if sequence == 1:
            low, high = spans.get(word, (begin, end))
            spans[word] = (min(low, begin), max(high, end))
    return [spans[word] if sequence == 1 else span for span, word, sequence in zip(offsets, word_ids, sequence_ids)]


def _window_scores(start_logits: torch.Tensor, end_logits: torch.Tensor,
                   allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Start and end probabilities (T,) over the allowed positions (the context tokens and position 0)."""
    low = torch.finfo(start_logits.dtype).min
    start = start_logits.float().masked_fill(~allowed, low).softmax(-1)
    end = end_logits.float().masked_fill(~allowed, low).softmax(-1)
    return start, end


def _top_spans(start: torch.Tensor, end: torch.Tensor, context: torch.Tensor, top_k: int,
               max_answer_len: int) -> list[tuple[float, int, int]]:
    """The `top_k` best (score, start, end) token spans inside the context, start <= end < start + max_answer_len."""
    length = start.shape[0]
    scores = start[:, None] * end[None, :]  # (T, T): p(start = i) * p(end = j)
    offsets = torch.arange(length)[None, :] - torch.arange(length)[:, None]  # j - i
    valid = (offsets >= 0) & (offsets < max_answer_len) & context[:, None] & context[None, :]
    count = min(top_k, int(valid.sum()))
    if count == 0:
        return []
    best = scores.masked_fill(~valid, -1.0).flatten().topk(count)
    return [(score, index // length, index % length)
            for score, index in zip(best.values.tolist(), best.indices.tolist())]


class LineageQuestionAnsweringPipeline(ChunkPipeline):
    """Extractive QA over an encoder with start / end logits (module docstring): `{"score", "start", "end",
    "answer"}`, a list of `top_k` of them when `top_k > 1`; character offsets index the context."""

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tokenizer = _padding_on_the_right(self.tokenizer)

    def __call__(self, *args, **kwargs):
        return super().__call__(_qa_inputs(args, kwargs), **kwargs)

    def _sanitize_parameters(self, top_k: int | None = None, max_answer_len: int | None = None,
                             handle_impossible_answer: bool | None = None, doc_stride: int | None = None,
                             max_seq_len: int | None = None, max_question_len: int | None = None,
                             align_to_words: bool | None = None, null_score_diff_threshold: float | None = None):
        for name, value in (("top_k", top_k), ("max_answer_len", max_answer_len), ("max_seq_len", max_seq_len),
                            ("max_question_len", max_question_len)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")
        if doc_stride is not None and (not isinstance(doc_stride, int) or doc_stride < 0):
            raise ValueError(f"`doc_stride` must be an integer >= 0, got {doc_stride!r}")
        preprocess = {k: v for k, v in (("doc_stride", doc_stride), ("max_seq_len", max_seq_len),
                                        ("max_question_len", max_question_len), ("align_to_words", align_to_words))
                      if v is not None}
        if null_score_diff_threshold is not None:
            self._check_threshold(null_score_diff_threshold, handle_impossible_answer)
        postprocess = {k: v for k, v in (("top_k", top_k), ("max_answer_len", max_answer_len),
                                         ("handle_impossible_answer", handle_impossible_answer),
                                         ("null_score_diff_threshold", null_score_diff_threshold)) if v is not None}
        return preprocess, {}, postprocess

    def _check_threshold(self, threshold, handle_impossible_answer: bool | None) -> None:
        """A finite number, given where the empty answer competes (as told, else as set when built, else saved)."""
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not math.isfinite(threshold):
            raise ValueError(f"`null_score_diff_threshold` must be a finite number, got {threshold!r}")
        told = (handle_impossible_answer, getattr(self, "_postprocess_params", {}).get("handle_impossible_answer"),
                self._saved().get("handle_impossible_answer"))
        if not next((value for value in told if value is not None), False):
            raise ValueError(f"`null_score_diff_threshold`={threshold!r} shifts the empty answer's score, which "
                             f"competes only with handle_impossible_answer=True (this model saved no such rule): pass "
                             f"both, or neither")

    def _saved(self) -> dict:
        """The defaults the run that fine-tuned the model saved for this pipeline (`task_specific_params`)."""
        return (getattr(self.model.config, "task_specific_params", None) or {}).get("question-answering", {})

    def _question(self, question: str, max_question_len: int | None) -> str:
        """`question` without its leading spaces, cut after its first `max_question_len` tokens (default: as the run
        that fine-tuned the model cut its questions, `task_specific_params` of its config, else 64), in the text, as
        training cuts them (BERT's run_squad.py's max_query_length)."""
        if max_question_len is None:
            max_question_len = self._saved().get("max_question_len", _DEFAULT_MAX_QUESTION_LEN)
        question = question.lstrip()
        spans = self.tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        return question[:spans[max_question_len - 1][1]] if len(spans) > max_question_len else question

    def _lengths(self, max_seq_len: int | None, doc_stride: int | None, question: str) -> tuple[int, int]:
        """The window length (384 by default, at most the model's positions) and the overlap (by default the run's
        `doc_stride`, `task_specific_params` of its config, else a quarter of a window, as training steps its
        windows), checked against the room the question leaves for context."""
        positions = getattr(self.model.config, "max_position_embeddings", 384)
        limit = min(self.tokenizer.model_max_length, positions)
        max_seq_len = min(384, limit) if max_seq_len is None else max_seq_len
        if max_seq_len > limit:
            raise ValueError(f"`max_seq_len` is {max_seq_len} but at most {limit} tokens can be read (the tokenizer's "
                             f"model_max_length {self.tokenizer.model_max_length}, the model's "
                             f"max_position_embeddings {positions})")
        whose = " (the run's, saved in the config)" if doc_stride is None and "doc_stride" in self._saved() else ""
        if doc_stride is None:
            doc_stride = self._saved().get("doc_stride", max_seq_len // 4)
        pair_tokens = len(self.tokenizer("", "")["input_ids"])  # the template's special tokens
        room = max_seq_len - len(self.tokenizer(question, add_special_tokens=False)["input_ids"]) - pair_tokens
        if doc_stride >= room:
            raise ValueError(f"the question leaves {room} of `max_seq_len`={max_seq_len} tokens for the context, so "
                             f"`doc_stride` must be below {room}, got {doc_stride}{whose} (cut the question with a "
                             f"smaller `max_question_len`, or raise `max_seq_len`)")
        return max_seq_len, doc_stride

    def preprocess(self, example: dict, doc_stride: int | None = None, max_seq_len: int | None = None,
                   max_question_len: int | None = None, align_to_words: bool = True):
        question = self._question(example["question"], max_question_len)
        max_seq_len, doc_stride = self._lengths(max_seq_len, doc_stride, question)
        encoded = self.tokenizer(question, example["context"], truncation="only_second",
                                 max_length=max_seq_len, stride=doc_stride, return_overflowing_tokens=True,
                                 return_offsets_mapping=True)
        windows = len(encoded["input_ids"])
        for index in range(windows):
            sequences, offsets = encoded.sequence_ids(index), encoded["offset_mapping"][index]
            if align_to_words:
                offsets = _word_offsets(offsets, encoded.word_ids(index), sequences)
            context = torch.tensor([s == 1 for s in sequences])  # (T,) context tokens
            model_inputs = {name: torch.tensor([encoded[name][index]]) for name in self.tokenizer.model_input_names
                            if name in encoded}
            yield {**model_inputs, "context_mask": context[None], "offsets": offsets, "example": example,
                   "is_last": index == windows - 1}

    def _forward(self, inputs: dict) -> dict:
        model_inputs = {name: inputs[name] for name in self.tokenizer.model_input_names if name in inputs}
        outputs = self.model(**model_inputs)
        passed = {key: inputs[key] for key in ("context_mask", "offsets", "example", "is_last")}
        return {"start_logits": outputs.start_logits, "end_logits": outputs.end_logits,
                "attention_mask": model_inputs["attention_mask"], **passed}

    def postprocess(self, windows: list[dict], top_k: int = 1, max_answer_len: int = 15,
                    handle_impossible_answer: bool | None = None,
                    null_score_diff_threshold: float | None = None) -> dict | list[dict]:
        """The best `top_k` answers of a question's windows; the empty answer, scored by [CLS], competes where
        `handle_impossible_answer` (default: the run's, saved where it trained on questions without answers; else
        off), ranked as if its log score were `null_score_diff_threshold` lower (run_qa.py's; default: the run's, else
        0): within a window, the logits' difference."""
        if handle_impossible_answer is None:
            handle_impossible_answer = self._saved().get("handle_impossible_answer", False)
        if null_score_diff_threshold is None:
            null_score_diff_threshold = self._saved().get("null_score_diff_threshold", 0.0)
        answers, null_score = [], None
        for window in windows:
            real = window["attention_mask"][0].bool()  # a batch pads its windows, on the tokenizer's padding side
            context = window["context_mask"][0][real]
            allowed = context.clone()
            allowed[0] = True
            start, end = _window_scores(window["start_logits"][0][real], window["end_logits"][0][real], allowed)
            window_null = float(start[0] * end[0])
            null_score = window_null if null_score is None else min(null_score, window_null)
            text, offsets = window["example"]["context"], window["offsets"]
            for score, first, last in _top_spans(start, end, context, top_k, max_answer_len):
                begin, finish = offsets[first][0], offsets[last][1]
                answers.append({"score": score, "start": begin, "end": finish, "answer": text[begin:finish]})
        empty = {"score": null_score, "start": 0, "end": 0, "answer": ""}
        if handle_impossible_answer:
            answers.append(empty)

        def rank(answer: dict) -> tuple[float, float]:  # by score where the threshold is 0
            shift = null_score_diff_threshold if answer is empty else 0.0
            return (math.log(answer["score"]) if answer["score"] > 0 else -math.inf) - shift, answer["score"]
        answers = _deduplicate(sorted(answers, key=rank, reverse=True))[:top_k]
        return answers[0] if top_k == 1 else answers


def _deduplicate(answers: list[dict]) -> list[dict]:
    """The first (best-scored) of the answers that cover the same characters (overlapping windows see a span twice)."""
    seen, kept = set(), []
    for answer in answers:
        if (answer["start"], answer["end"]) not in seen:
            seen.add((answer["start"], answer["end"]))
            kept.append(answer)
    return kept


__all__ = ["LineageQuestionAnsweringPipeline", "LineageText2TextGenerationPipeline", "LineageTranslationPipeline",
           "PIPELINES_BY_AUTO_CLASS", "custom_pipelines_for", "served_tasks"]
