# spaCy's named-entity recognizer trained from scratch on a ../shared/data NER task, for the side-by-side table of
# `npm run bench -- quality` (docs/training.md). Run by hand, not by npm test:
#   bench/.venv/bin/pip install spacy
#   bench/.venv/bin/python bench/spacy_ner.py wnut17 --minutes 20
# The model is spaCy's default `ner` pipe (the quickstart's efficiency choice: a HashEmbedCNN tok2vec over NORM,
# PREFIX, SUFFIX and SHAPE, width 96, depth 4, and the transition-based parser), on a blank English pipeline (no
# vectors), on the data's own tokens (the texts are space-joined tokens, so this is spaCy's gold_preproc), trained
# with spaCy's default optimizer and batch sizes compounding from 4 to 32 as `spacy train` does; after each epoch it
# scores dev (strict span F1, as Loom's evaluateNer) and keeps the best (as `spacy train` keeps model-best), and it
# stops at the wall-clock budget. Selecting on dev itself favours spaCy over Loom, which selects on a split of train.
import argparse
import json
import random
import time
from pathlib import Path

import spacy
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import compounding, minibatch

DATA = Path(__file__).resolve().parent.parent.parent / 'shared' / 'data'


def load(task: str, split: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / task / f'{split}.jsonl').read_text().splitlines() if line.strip()]


def doc_of(nlp, text: str) -> Doc:
    words = text.split(' ')
    return Doc(nlp.vocab, words=words, spaces=[True] * (len(words) - 1) + [False])


def spans_of(doc: Doc, rec: dict) -> set[tuple[int, int, str]]:
    out = set()
    for e in rec.get('entities', []):
        sp = doc.char_span(e['start'], e['end'], label=e['label'], alignment_mode='expand')
        if sp is not None:
            out.add((sp.start_char, sp.end_char, e['label']))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('task')
    ap.add_argument('--minutes', type=float, default=20)
    ap.add_argument('--seed', type=int, default=42)
    a = ap.parse_args()
    random.seed(a.seed)
    spacy.util.fix_random_seed(a.seed)
    train, dev = load(a.task, 'train'), load(a.task, 'dev')
    nlp = spacy.blank('en')
    ner = nlp.add_pipe('ner')
    for lab in sorted({e['label'] for r in train for e in r.get('entities', [])}):
        ner.add_label(lab)

    def example(rec: dict) -> Example:
        doc = doc_of(nlp, rec['text'])
        ents = [(s, e, lab) for s, e, lab in sorted(spans_of(doc, rec))]
        # overlapping gold spans (rare) cannot be a flat entity layer: keep the first of each overlap
        flat, end = [], -1
        for s, e, lab in ents:
            if s >= end:
                flat.append((s, e, lab))
                end = e
        return Example.from_dict(doc, {'entities': flat})

    train_ex = [example(r) for r in train]
    dev_docs = [doc_of(nlp, r['text']) for r in dev]
    gold = [spans_of(d, r) for d, r in zip(dev_docs, dev)]
    optimizer = nlp.initialize(lambda: train_ex)
    t0 = time.time()
    budget = a.minutes * 60
    best, best_epoch, epoch = 0.0, 0, 0
    while time.time() - t0 < budget:
        epoch += 1
        random.shuffle(train_ex)
        losses: dict = {}
        for batch in minibatch(train_ex, size=compounding(4.0, 32.0, 1.001)):
            nlp.update(batch, sgd=optimizer, drop=0.1, losses=losses)
            if time.time() - t0 >= budget:
                break
        tp = fp = fn = 0
        for doc, g in zip(nlp.pipe(doc_of(nlp, r['text']) for r in dev), gold):
            p = {(e.start_char, e.end_char, e.label_) for e in doc.ents}
            tp += len(p & g)
            fp += len(p - g)
            fn += len(g - p)
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        if f1 > best:
            best, best_epoch = f1, epoch
        print(json.dumps({'epoch': epoch, 'dev_f1': round(f1, 4), 'p': round(prec, 4), 'r': round(rec, 4),
                          'loss': round(float(losses.get('ner', 0.0)), 1), 'elapsed_s': round(time.time() - t0, 1)}),
              flush=True)
    print(json.dumps({'task': a.task, 'spacy': spacy.__version__, 'best_dev_f1': round(best, 4),
                      'best_epoch': best_epoch, 'epochs': epoch, 'seconds': round(time.time() - t0, 1)}))


if __name__ == '__main__':
    main()
