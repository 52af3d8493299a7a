"""Reference implementation of WebShop's reward in Python, for parity checks of the TypeScript port.

It follows WebShop's engine/goal.py (the version with exact size matching) with the libraries the
original ran with: thefuzz 0.19.0 without python-Levenshtein (difflib ratios) and spaCy for the
part-of-speech step. Not used at run time; `parity/run.ts` calls it.

usage: python reference.py CASES.json OUT.json --nouns given|spacy [--spacy-model NAME]
  CASES.json: {"products": {asin: product}, "cases": [{"purchased": asin, "goal": {...}, "price": x,
               "options": {...}, "nouns": {text: [words]}}], "pairs": [[a, b], ...]}
  OUT.json:   {"rewards": [{"reward": r, "info": {...}}], "ratios": [int], "nouns": {text: [words]}}
"""
import argparse
import json

from thefuzz import fuzz

COLORS = (
    'alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown burgundy '
    'camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac copper coral '
    'cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold granite grape graphite grass '
    'gray green grey heather indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta maroon '
    'mauve merlot midnight mint mocha multicolor mushroom mustard natural navy nude olive orange peach pewter '
    'pink plum purple rainbow red rose royal rust sand sapphire seashell silver skull slate steel stone '
    'stonewash sunflower tan taupe teal tiger turquoise violet walnut wheat white wine yellow'
).split()


def colour(value):
    return next((c for c in COLORS if c in value), value)


def texts_of(product):
    return [product['Title'].lower(), ' '.join(product['BulletPoints']).lower(), product['Description'].lower()]


def type_part(purchased, goal, nouns_of):
    same_query = purchased['query'] == goal['query']
    levels_p = {x.strip() for x in purchased['product_category'].split('›')}
    levels_g = {x.strip() for x in goal['product_category'].split('›')}
    same_category = len(levels_p & levels_g) >= 2
    bought = nouns_of(purchased['name'])
    wanted = nouns_of(goal['name'])
    title = 0.2 if not wanted else len(set(bought) & set(wanted)) / len(wanted)
    r = 1.0
    if not (same_query or same_category or title > 0.2):
        r = 0.5
    if title < 0.1:
        r = 0.1
    if title == 0.0:
        r = 0.0
    return r, same_query, same_category, title


def attribute_part(purchased, goal):
    hits = 0
    texts = texts_of(purchased)
    for wanted in goal['attributes']:
        if any(fuzz.token_set_ratio(have, wanted) > 85 for have in purchased['Attributes']):
            hits += 1
        elif any(wanted in t for t in texts):
            hits += 1
    return hits


def option_part(purchased, goal_values, chosen):
    wanted = [colour(v) for v in goal_values]
    texts = texts_of(purchased)
    hits = 0
    for name, value in chosen.items():
        value = colour(value)
        if name.lower() == 'size':
            ok = value in wanted
        else:
            ok = any(fuzz.token_set_ratio(w, value) > 85 for w in wanted)
        if ok or any(value in t for t in texts):
            hits += 1
    return hits


def reward(purchased, goal, price, chosen, nouns_of):
    goal_values = list(goal['goal_options'].values()) if isinstance(goal['goal_options'], dict) else goal['goal_options']
    r_type, same_query, same_category, title = type_part(purchased, goal, nouns_of)
    price_ok = price <= goal['price_upper']
    n_att = attribute_part(purchased, goal)
    n_opt = option_part(purchased, goal_values, chosen)
    total = (n_att + n_opt + price_ok) / (len(goal['attributes']) + len(goal_values) + 1)
    total *= r_type
    return total, {'r_type': r_type, 'query_match': same_query, 'category_match': same_category,
                   'title_score': title, 'num_attr_matches': n_att, 'num_option_matches': n_opt}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('cases')
    ap.add_argument('out')
    ap.add_argument('--nouns', choices=['given', 'spacy'], required=True)
    ap.add_argument('--spacy-model', default='en_core_web_sm')
    args = ap.parse_args()
    data = json.load(open(args.cases))
    products = data['products']
    spacy_nouns = {}
    if args.nouns == 'spacy':
        import importlib
        nlp = importlib.import_module(args.spacy_model).load()

        def nouns_of(text):
            if text not in spacy_nouns:
                spacy_nouns[text] = [t.text.lower() for t in nlp(text) if t.pos_ in ('PNOUN', 'NOUN', 'PROPN')]
            return spacy_nouns[text]
        for p in products.values():
            nouns_of(p['name'])
    else:
        def nouns_of(text):
            return data['nouns'][text]
    rewards = []
    for case in data['cases']:
        r, info = reward(products[case['purchased']], case['goal'], case['price'], case['options'], nouns_of)
        rewards.append({'reward': r, 'info': info})
    ratios = [fuzz.token_set_ratio(a, b) for a, b in data.get('pairs', [])]
    json.dump({'rewards': rewards, 'ratios': ratios, 'nouns': spacy_nouns}, open(args.out, 'w'))


if __name__ == '__main__':
    main()
