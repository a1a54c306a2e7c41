# spaCy's text classifier trained from scratch on a ../shared/data classification task, for the side-by-side table of
# `npm run bench -- quality` (docs/training.md). Run by hand, not by npm test:
#   bench/.venv/bin/pip install spacy
#   bench/.venv/bin/python bench/spacy_textcat.py sst2 --minutes 10
# The model is spaCy's quickstart "efficiency" textcat (spacy.TextCatBOW.v3, unigrams, exclusive classes), on a blank
# English pipeline (no vectors), trained with spaCy's default optimizer (Adam 0.001) and batch sizes compounding from
# 4 to 32 as `spacy train` does; after each epoch it scores dev and keeps the best accuracy (as `spacy train` keeps
# model-best), and it stops at the wall-clock budget.
import argparse
import json
import random
import time
from pathlib import Path

import spacy
from spacy.training import Example
from spacy.util import compounding, minibatch

DATA = Path(__file__).resolve().parent.parent.parent / 'shared' / 'data'


def load(task: str, split: str) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in (DATA / task / f'{split}.jsonl').read_text().splitlines() if line.strip()]
    return [(r['text'], r['label'] if isinstance(r['label'], str) else r['label'][0]) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('task')
    ap.add_argument('--minutes', type=float, default=10)
    ap.add_argument('--seed', type=int, default=42)
    a = ap.parse_args()
    random.seed(a.seed)
    spacy.util.fix_random_seed(a.seed)
    train, dev = load(a.task, 'train'), load(a.task, 'dev')
    labels = sorted({y for _, y in train})
    nlp = spacy.blank('en')
    model = {'@architectures': 'spacy.TextCatBOW.v3', 'exclusive_classes': True, 'ngram_size': 1,
             'no_output_layer': False}
    textcat = nlp.add_pipe('textcat', config={'model': model})
    for y in labels:
        textcat.add_label(y)

    def example(text: str, y: str) -> Example:
        return Example.from_dict(nlp.make_doc(text), {'cats': {lab: float(lab == y) for lab in labels}})

    train_ex = [example(x, y) for x, y in train]
    optimizer = nlp.initialize(lambda: train_ex)
    t0 = time.time()
    budget = a.minutes * 60
    best, best_epoch, epoch = 0.0, 0, 0
    while time.time() - t0 < budget:
        epoch += 1
        random.shuffle(train_ex)
        for batch in minibatch(train_ex, size=compounding(4.0, 32.0, 1.001)):
            nlp.update(batch, sgd=optimizer, drop=0.0)
            if time.time() - t0 >= budget:
                break
        right = 0
        for doc, (_, y) in zip(nlp.pipe(x for x, _ in dev), dev):
            right += max(doc.cats, key=doc.cats.get) == y
        acc = right / len(dev)
        if acc > best:
            best, best_epoch = acc, epoch
        print(json.dumps({'epoch': epoch, 'dev_accuracy': round(acc, 4), 'elapsed_s': round(time.time() - t0, 1)}),
              flush=True)
    print(json.dumps({'task': a.task, 'spacy': spacy.__version__, 'best_dev_accuracy': round(best, 4),
                      'best_epoch': best_epoch, 'epochs': epoch, 'seconds': round(time.time() - t0, 1)}))


if __name__ == '__main__':
    main()
