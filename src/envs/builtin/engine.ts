/**
 * Actions of the built-in environment: a small parser for free text and the list of
 * actions that make sense in the current state. `act` never throws on any input string;
 * an action that is unknown or impossible leaves the world as it was and says why.
 */
import { World, article, contentsSentence, describeRoom, joinAnd, listing, type Thing } from './world.ts';
import { WORDS } from './vocab.ts';

/** Longer inputs are cut before parsing. */
export const MAX_INPUT_CHARS = 200;

export function normalize(raw: unknown): string {
  const s = typeof raw === 'string' ? raw : raw == null ? '' : String(raw);
  return s
    .slice(0, MAX_INPUT_CHARS)
    .toLowerCase()
    .replace(/[^a-z0-9 ]+/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
}

function stripArticles(phrase: string): string {
  return phrase
    .split(' ')
    .filter((x) => x && x !== 'the' && x !== 'a' && x !== 'an' && x !== 'some')
    .join(' ');
}

/** Echo a phrase back only if it is short and made of the environment's own words. */
function echo(phrase: string): string | null {
  const ws = phrase.split(' ');
  return ws.length <= 3 && ws.every((x) => WORDS.has(x)) ? phrase : null;
}

function notHere(phrase: string): string {
  const p = echo(phrase);
  return p ? `You don't see ${article(p)} here.` : "You don't see that here.";
}

type Resolved = { thing: Thing; error?: undefined } | { thing?: undefined; error: string };

/** Find a visible thing by its full name ("red key") or, when unambiguous, its noun ("key"). */
function resolve(w: World, phrase: string): Resolved {
  const p = stripArticles(phrase);
  if (!p) return { error: 'What do you mean?' };
  const vis = w.visibleThings();
  const exact = vis.find((t) => t.name === p);
  if (exact) return { thing: exact };
  const byNoun = vis.filter((t) => t.noun === p);
  if (byNoun.length === 1) return { thing: byNoun[0] };
  if (byNoun.length > 1) {
    const names = byNoun.map((t) => `the ${t.name}`);
    return { error: `Which ${p} do you mean: ${names.slice(0, -1).join(', ')} or ${names[names.length - 1]}?` };
  }
  return { error: notHere(p) };
}

// ---------------------------------------------------------------- verbs

function go(w: World, phrase: string): string {
  const p = stripArticles(phrase.replace(/^to /, ''));
  if (p === w.player) return `You are already in the ${p}.`;
  const n = w.neighbours(w.player).find((x) => x.room === p);
  if (!n) {
    const e = echo(p);
    return e && w.rooms.includes(p) ? `No door leads from here to the ${p}.` : "You can't go there from here.";
  }
  if (n.door.locked) return `The door to the ${p} is locked.`;
  w.player = p;
  return describeRoom(w);
}

function open(w: World, phrase: string): string {
  const r = resolve(w, phrase);
  if (r.error !== undefined) return r.error;
  const t = r.thing;
  if (t.kind !== 'container') return `You can't open the ${t.name}.`;
  if (!t.openable) return `The ${t.name} has no lid. It is always open.`;
  if (t.open) return `The ${t.name} is already open.`;
  t.open = true;
  if (t.trap) {
    w.flags.failed = 'trap';
    return `The ${t.name} was the wrong box. All the boxes lock shut. You failed.`;
  }
  const inside = w.contents(t);
  return `You open the ${t.name}. ${inside.length ? `It holds ${joinAnd(inside.map(listing))}.` : 'It is empty.'}`;
}

function close(w: World, phrase: string): string {
  const r = resolve(w, phrase);
  if (r.error !== undefined) return r.error;
  const t = r.thing;
  if (t.kind !== 'container' || !t.openable) return `You can't close the ${t.name}.`;
  if (!t.open) return `The ${t.name} is already closed.`;
  t.open = false;
  return `You close the ${t.name}.`;
}

function take(w: World, phrase: string): string {
  const r = resolve(w, phrase.split(' from ')[0]);
  if (r.error !== undefined) return r.error;
  const t = r.thing;
  if (w.held(t)) return `You already have the ${t.name}.`;
  if (!t.portable) return `You can't take the ${t.name}.`;
  const h = w.holder(t);
  t.loc = { held: true };
  if (h?.kind === 'device' && h.on) {
    h.on = false;
    return `You take the ${t.name} from the ${h.name}. The ${h.name} turns off.`;
  }
  return h ? `You take the ${t.name} from the ${h.name}.` : `You take the ${t.name}.`;
}

function drop(w: World, phrase: string): string {
  const r = resolve(w, phrase);
  if (r.error !== undefined) return r.error;
  const t = r.thing;
  if (!w.held(t)) return `You don't have the ${t.name}.`;
  t.loc = { room: w.player };
  return `You drop the ${t.name}.`;
}

function put(w: World, what: string, where: string): string {
  const a = resolve(w, what);
  if (a.error !== undefined) return a.error;
  const t = a.thing;
  if (!w.held(t)) return `You don't have the ${t.name}.`;
  const b = resolve(w, where);
  if (b.error !== undefined) return b.error;
  const d = b.thing;
  if (d === t) return `You can't put the ${t.name} in itself.`;
  switch (d.kind) {
    case 'container':
      if (!w.showsContents(d)) return `The ${d.name} is closed.`;
      t.loc = { in: d.name };
      return `You put the ${t.name} in the ${d.name}.`;
    case 'device': {
      if (!t.part || t.noun !== d.needs) return `The ${t.name} does not fit in the ${d.name}.`;
      const has = w.contents(d);
      if (has.length) return `The ${d.name} already holds ${article(has[0].name)}.`;
      t.loc = { in: d.name };
      return `You put the ${t.name} in the ${d.name}.`;
    }
    case 'stove': {
      if (!t.vessel) return `You can't put the ${t.name} on the ${d.name}.`;
      if (w.contents(d).length) return `There is no room on the ${d.name}.`;
      t.loc = { in: d.name };
      if (d.on && !t.full) {
        w.flags.failed = 'ruined';
        return `The empty ${t.name} cracks on the hot ${d.name}. It is ruined. You failed.`;
      }
      return `You put the ${t.name} on the ${d.name}.`;
    }
    default:
      return `You can't put things in the ${d.name}.`;
  }
}

function turn(w: World, phrase: string, on: boolean): string {
  const r = resolve(w, phrase);
  if (r.error !== undefined) return r.error;
  const t = r.thing;
  if (t.kind !== 'device' && t.kind !== 'stove') return `You can't turn ${on ? 'on' : 'off'} the ${t.name}.`;
  if (!!t.on === on) return `The ${t.name} is already ${on ? 'on' : 'off'}.`;
  if (!on) {
    t.on = false;
    return `The ${t.name} turns off.`;
  }
  if (t.kind === 'device') {
    if (!w.contents(t).some((x) => x.noun === t.needs)) return `Nothing happens. The ${t.name} needs ${article(t.needs!)}.`;
    t.on = true;
    return `The ${t.name} turns on.`;
  }
  t.on = true;
  const pot = w.contents(t).find((x) => x.vessel);
  if (pot && !pot.full) {
    w.flags.failed = 'ruined';
    return `The ${t.name} heats the empty ${pot.name} until it cracks. It is ruined. You failed.`;
  }
  return pot ? `The ${t.name} is now on. The water in the ${pot.name} gets warm.` : `The ${t.name} is now on.`;
}

function fill(w: World, phrase: string): string {
  const r = resolve(w, phrase.split(/ (?:at|with|from|in) /)[0]);
  if (r.error !== undefined) return r.error;
  const t = r.thing;
  if (!t.vessel) return `You can't fill the ${t.name}.`;
  if (!w.held(t)) return `You need to hold the ${t.name} to fill it.`;
  if (!w.inRoom(w.player).some((x) => x.kind === 'sink')) return 'There is no sink here.';
  if (t.full) return `The ${t.name} is already full.`;
  t.full = true;
  return `You fill the ${t.name} with water.`;
}

function read(w: World, phrase: string): string {
  const r = resolve(w, phrase);
  if (r.error !== undefined) return r.error;
  const t = r.thing;
  if (t.kind !== 'note') return `There is nothing written on the ${t.name}.`;
  w.flags.noteRead = true;
  return `The note says: ${t.text}`;
}

function unlock(w: World, phrase: string): string {
  const p = stripArticles(phrase.replace(/ with .*$/, ''));
  const m = /^(?:door to |door of )?(.*?)(?: door)?$/.exec(p);
  const target = m ? m[1] : '';
  const nb = w.neighbours(w.player);
  const locked = nb.filter((n) => n.door.locked);
  const n = target === 'door' || target === '' ? (locked.length === 1 ? locked[0] : undefined) : nb.find((x) => x.room === target);
  if (!n) return locked.length ? 'Which door? Say: unlock door to a room.' : 'There is no locked door here.';
  if (!n.door.locked) return `The door to the ${n.room} is not locked.`;
  const keys = w.inventory().filter((t) => t.noun === 'key');
  if (!keys.length) return 'You have no key.';
  const key = keys.find((k) => k.colour === n.door.lock);
  if (!key) return `The ${keys[0].name} does not fit. The lock is ${n.door.lock}.`;
  n.door.locked = false;
  return `You unlock the door to the ${n.room} with the ${key.name}.`;
}

function wait(w: World): string {
  const stove = w.inRoom(w.player).find((t) => t.kind === 'stove' && t.on);
  const pot = stove && w.contents(stove).find((x) => x.vessel && x.full);
  if (pot) {
    w.flags.boiled = pot.name;
    return `The water in the ${pot.name} boils.`;
  }
  return 'Time passes.';
}

function inventory(w: World): string {
  const inv = w.inventory();
  return inv.length ? `You carry ${joinAnd(inv.map(listing))}.` : 'You carry nothing.';
}

function examine(w: World, phrase: string): string {
  const r = resolve(w, phrase);
  if (r.error !== undefined) return r.error;
  const t = r.thing;
  const s = w.showsContents(t) ? contentsSentence(w, t) || (t.open ? 'It is empty.' : '') : '';
  return `You see ${listing(t)}.${s ? ` ${s}` : ''}`;
}

/** Apply a free-text action to the world and say what happened. Never throws on any input. */
export function act(w: World, raw: unknown): string {
  const s = normalize(raw);
  if (!s) return 'Please type an action, for example: look around.';
  let m: RegExpExecArray | null;
  if (s === 'look' || s === 'look around' || s === 'l') return describeRoom(w);
  if (s === 'inventory' || s === 'i' || s === 'inv') return inventory(w);
  if (s === 'wait' || s === 'z') return wait(w);
  if ((m = /^(?:go to|go into|go|walk to|move to|enter) (.+)$/.exec(s))) return go(w, m[1]);
  if ((m = /^open (.+)$/.exec(s))) return open(w, m[1]);
  if ((m = /^close (.+)$/.exec(s))) return close(w, m[1]);
  if ((m = /^(?:take|get|pick up|grab) (.+)$/.exec(s))) return take(w, m[1]);
  if ((m = /^(?:drop|put down) (.+)$/.exec(s))) return drop(w, m[1]);
  if ((m = /^(?:put|place|insert) (.+?) (?:in|into|inside|on|onto) (.+)$/.exec(s))) return put(w, m[1], m[2]);
  if ((m = /^(?:turn|switch) on (.+)$/.exec(s)) || (m = /^(?:turn|switch) (.+) on$/.exec(s))) return turn(w, m[1], true);
  if ((m = /^(?:turn|switch) off (.+)$/.exec(s)) || (m = /^(?:turn|switch) (.+) off$/.exec(s))) return turn(w, m[1], false);
  if ((m = /^fill (.+)$/.exec(s))) return fill(w, m[1]);
  if ((m = /^read (.+)$/.exec(s))) return read(w, m[1]);
  if ((m = /^unlock (.+)$/.exec(s))) return unlock(w, m[1]);
  if ((m = /^(?:examine|look at|x) (.+)$/.exec(s))) return examine(w, m[1]);
  return "I don't understand that. Try one of the listed actions.";
}

/** The actions that make sense now, sorted. Free text outside this list is still parsed. */
export function validActions(w: World): string[] {
  const acts = new Set<string>(['inventory', 'look around']);
  const held = w.inventory();
  const hasKey = held.some((t) => t.noun === 'key');
  for (const { room, door } of w.neighbours(w.player)) {
    if (!door.locked) acts.add(`go to ${room}`);
    else if (hasKey) acts.add(`unlock door to ${room}`);
  }
  let somethingOn = false;
  for (const t of w.visibleThings()) {
    const isHeld = w.held(t);
    if (t.portable) acts.add(isHeld ? `drop ${t.name}` : `take ${t.name}`);
    switch (t.kind) {
      case 'container':
        if (t.openable && !t.open) acts.add(`open ${t.name}`);
        else for (const x of held) if (x !== t) acts.add(`put ${x.name} in ${t.name}`);
        break;
      case 'device':
        acts.add(`turn ${t.on ? 'off' : 'on'} ${t.name}`);
        somethingOn ||= !!t.on;
        if (!w.contents(t).length) for (const x of held) if (x.part) acts.add(`put ${x.name} in ${t.name}`);
        break;
      case 'stove':
        acts.add(`turn ${t.on ? 'off' : 'on'} ${t.name}`);
        somethingOn ||= !!t.on;
        if (!w.contents(t).length) for (const x of held) if (x.vessel) acts.add(`put ${x.name} on ${t.name}`);
        break;
      case 'sink':
        for (const x of held) if (x.vessel && !x.full) acts.add(`fill ${x.name}`);
        break;
      case 'note':
        acts.add(`read ${t.name}`);
        break;
      default:
        break;
    }
  }
  if (somethingOn) acts.add('wait');
  return [...acts].sort();
}
