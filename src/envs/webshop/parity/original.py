"""Scores purchases with WebShop's ORIGINAL get_reward, for parity checks of the TypeScript port.

The original web_agent_site/engine/goal.py and normalize.py of one revision are imported unchanged
from --webshop (a folder written by fetch-original.sh). Only what goal.py loads at import time is
provided from outside:
  - spaCy: with --nouns given, `spacy.load` returns a tagger that yields the port's nouns for each
    text (so everything but the tagger is compared); with --nouns spacy, the real spaCy with
    --spacy-model, whatever model name goal.py asks for (en_core_web_lg is not obtainable here);
  - thefuzz 0.19.0 without python-Levenshtein and rich: real packages
    (scripts/requirements-webshop-reference.txt).
Not used at run time; parity/run.ts calls it.

usage: python original.py --webshop DIR CASES.json OUT.json --nouns given|spacy [--spacy-model NAME]
  CASES.json: {"products": {asin: product}, "cases": [{"purchased": asin, "goal": {...}, "price": x,
               "options": {...}}], "pairs": [[a, b], ...], "nouns": {text: [words]}}
  OUT.json:   {"rewards": [{"reward": r, "info": {...}}], "ratios": [int], "nouns": {text: [words]}}
"""
import argparse
import importlib
import json
import sys
import types


class GivenNounsTagger:
    """Stands in for a spaCy pipeline: every token it yields is one of the given nouns."""

    def __init__(self, nouns):
        self.nouns = nouns

    def __call__(self, text):
        if text not in self.nouns:
            raise KeyError(f'no nouns given for {text!r}')
        return [types.SimpleNamespace(text=w, pos_='NOUN') for w in self.nouns[text]]


def install_spacy(mode, nouns, model):
    if mode == 'given':
        fake = types.ModuleType('spacy')
        fake.load = lambda _name: GivenNounsTagger(nouns)
        sys.modules['spacy'] = fake
        return None
    import spacy
    real_load = spacy.load
    loaded = {}

    def load(_name):
        if 'nlp' not in loaded:
            loaded['nlp'] = real_load(model)
        return loaded['nlp']
    spacy.load = load
    return loaded


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--webshop', required=True, help='folder holding web_agent_site/engine/goal.py of one revision')
    ap.add_argument('cases')
    ap.add_argument('out')
    ap.add_argument('--nouns', choices=['given', 'spacy'], required=True)
    ap.add_argument('--spacy-model', default='en_core_web_sm')
    args = ap.parse_args()
    data = json.load(open(args.cases))
    products = data['products']
    loaded = install_spacy(args.nouns, data.get('nouns', {}), args.spacy_model)
    sys.path.insert(0, args.webshop)
    goal_module = importlib.import_module('web_agent_site.engine.goal')
    if not goal_module.__file__.startswith(args.webshop.rstrip('/') + '/'):
        sys.exit(f'imported {goal_module.__file__}, not the copy in {args.webshop}')
    from thefuzz import fuzz
    import thefuzz
    if thefuzz.__version__ != '0.19.0':
        sys.exit(f'thefuzz {thefuzz.__version__} found; the original ran 0.19.0')

    rewards = []
    for case in data['cases']:
        reward, info = goal_module.get_reward(
            products[case['purchased']], case['goal'], price=case['price'], options=case['options'], verbose=True)
        rewards.append({'reward': reward, 'info': info})
    ratios = [fuzz.token_set_ratio(a, b) for a, b in data.get('pairs', [])]
    spacy_nouns = {}
    if loaded is not None:
        nlp = loaded['nlp']
        for p in products.values():
            spacy_nouns[p['name']] = [t.text.lower() for t in nlp(p['name']) if t.pos_ in ('PNOUN', 'NOUN', 'PROPN')]
    json.dump({'rewards': rewards, 'ratios': ratios, 'nouns': spacy_nouns}, open(args.out, 'w'))


if __name__ == '__main__':
    main()
