/**
 * THE STAND-IN STRONG TIP WRITER (issue #89's study): an OpenAI-compatible server that answers the
 * reflection prompt (src/memory/reflector.ts `reflectionPrompt`) with a tip written from the built-in
 * environment's own scripted solver, not by a language model. No strong model can be downloaded here; this
 * stands where one would be, over the same API (`memory.reflector: openai`, `empo2 memory-proxy
 * --reflector`), and every result that uses it says so.
 *
 * How it writes a tip: the prompt names the task and shows the trajectory; the episode is found among the
 * built-in environment's (family, variation) pairs (`place`) by its task text and, where that is not unique,
 * by the first observation the prompt shows: step 1's (equal to it, or, where an agent's message holds more
 * than the observation, containing it), else the line under the task, where an episode's description (the
 * memory proxy's `POST /episodes` `description`) names where it starts. The trainer's prompt shows only the
 * last 12 steps and its task line is the task text alone, and no task text of power or clue is unique (4 of
 * unlock's 300 are); so, failing those, it keeps the candidates with the task text whose world fits every fact the
 * shown observations state (`observationFacts`: each room as described, its doors and the things that
 * never move; what the other answers name: things carried, opened, taken from, a device's part, a note's
 * words), checking only what play never changes, so the true episode always fits. If those that fit share
 * one solver plan from the start, that is the plan; if their plans differ, no tip (`ambiguous`). The
 * layouts and plans are read once at start-up (about 2 s for power, clue and unlock's 900 episodes; then
 * about 2 ms a prompt). Placement rates on real episodes: RUNS.md (placement-check.ts).
 * The tip is the solver's plan from the start, "To <task>: a, then b, then c.", cut to the reflection's
 * word limit. An episode it cannot place gets an empty answer, which the writer's caller stores as no tip
 * (counted as skipped in metrics.jsonl).
 *
 *   npx tsx results/strong-writer/oracle-writer.ts [--port 8089] [--tasks power,clue,unlock]
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { createEnv, type Env } from '../../src/index.ts';
import { generateWorld } from '../../src/internals.ts';

/** The reflection's word limit (src/memory/reflector.ts MAX_TIP_WORDS). */
const MAX_WORDS = 100;

const oneLine = (s: string) => s.replace(/\s+/g, ' ').trim();

type World = ReturnType<typeof generateWorld>;

/**
 * What of an episode's world never changes while it is played: its rooms, each with its doors in the
 * world's order (which ones start locked: a door is never locked again once unlocked) and the things that
 * cannot be carried, in the world's order (containers, devices, stove, sink, note never move); and every
 * thing by name: its place in the world's order (a room's listing follows it), whether it can be carried,
 * and the state words its listing may carry ("closed"/"open", "(on)"/"(off)", "(full)").
 */
interface Layout {
  rooms: Map<string, { doors: string[]; locked: Set<string>; fixed: string[] }>;
  things: Map<string, LaidThing>;
}

interface LaidThing {
  index: number;
  portable: boolean;
  tags: readonly string[];
  kind: string;
  noun: string;
  openable: boolean;
  /** A part (battery, fuse, bulb); a device's part; a note's text. */
  part: boolean;
  needs?: string;
  text?: string;
}

export interface Episode {
  family: string;
  variation: number;
  firstObservation: string;
  layout: Layout;
  /** The solver's actions from the start (at most the step limit). */
  plan: string[];
}

function layoutOf(w: World): Layout {
  const rooms: Layout['rooms'] = new Map();
  for (const room of w.rooms) {
    const nb = w.neighbours(room);
    rooms.set(room, {
      doors: nb.map((n) => n.room),
      locked: new Set(nb.filter((n) => n.door.locked).map((n) => n.room)),
      fixed: w
        .inRoom(room)
        .filter((t) => !t.portable)
        .map((t) => t.name),
    });
  }
  const things: Layout['things'] = new Map();
  w.things.forEach((t, index) => {
    // As src/envs/builtin/world.ts `listing` writes it.
    const tags =
      t.kind === 'container' && t.openable
        ? ['closed', 'open']
        : t.kind === 'device' || t.kind === 'stove'
          ? ['on', 'off']
          : t.vessel
            ? ['', 'full']
            : [''];
    things.set(t.name, {
      index,
      portable: t.portable,
      tags,
      kind: t.kind,
      noun: t.noun,
      openable: !!t.openable,
      part: !!t.part,
      needs: t.needs,
      text: t.text,
    });
  });
  return { rooms, things };
}

/** The built-in episodes of `tasks` (every split; null: all tasks), indexed by task text, each with its layout and the solver's plan. */
export async function indexEpisodes(tasks: string[] | null): Promise<Map<string, Episode[]>> {
  const env = await createEnv({ name: 'builtin', tasks });
  const byTask = new Map<string, Episode[]>();
  for (const family of env.tasks())
    for (const split of ['train', 'dev', 'test'] as const)
      for (const variation of env.variations(family, split)) {
        const r = await env.reset(family, variation);
        const list = byTask.get(r.task) ?? [];
        const layout = layoutOf(generateWorld(family, variation));
        list.push({ family, variation, firstObservation: oneLine(r.observation), layout, plan: await plan(env, family, variation) });
        byTask.set(r.task, list);
      }
  await env.close();
  return byTask;
}

/** The solver's actions from the start of `family` #`variation` (at most its step limit). */
async function plan(env: Env, family: string, variation: number): Promise<string[]> {
  await env.reset(family, variation);
  const actions: string[] = [];
  for (let t = 0; t < env.maxSteps(family) && !env.done(); t++) {
    const a = env.oracleAction?.() ?? null;
    if (a === null) break;
    actions.push(a);
    await env.step(a);
  }
  return actions;
}

/** A thing in a room's listing: "a closed red box" is red box, closed; "a lamp (off)" is lamp, off. */
interface Listed {
  name: string;
  tag: string;
}

/** A room as an observation showed it (src/envs/builtin/world.ts `describeRoom`). */
export interface RoomView {
  room: string;
  /** "You see ..." (empty: "The room is bare."). */
  seen: Listed[];
  /** "The red box holds ...": what an open container or a device here shows inside. */
  holds: { holder: string; items: Listed[] }[];
  /** The rooms a door leads to, then those behind a locked door, as listed. */
  open: string[];
  locked: string[];
}

/** "a, b and c" as [a, b, c] (src/envs/builtin/world.ts `joinAnd`; no name holds a comma or " and "). */
function splitAnd(s: string): string[] {
  const parts = s.split(', ');
  return [...parts.slice(0, -1), ...parts[parts.length - 1].split(' and ')];
}

function listed(s: string): Listed[] | null {
  const out: Listed[] = [];
  for (const x of splitAnd(s)) {
    const m = /^an? (?:(closed|open) )?([a-z ]+?)(?: \((on|off|full)\))?$/.exec(x);
    if (!m) return null;
    out.push({ name: m[2], tag: m[1] ?? m[3] ?? '' });
  }
  return out;
}

/**
 * Every whole room description in `text`: "You are in the R.", "You see ..." or "The room is bare.", any
 * "The X holds ..." sentences, the doors that lead on, the locked doors. A description cut short is left out.
 */
export function roomViews(text: string): RoomView[] {
  const views: RoomView[] = [];
  for (const m of text.matchAll(/\bYou are in the /g)) {
    const sentences = text.slice(m.index).split(/\.(?: |$)/);
    const room = /^You are in the ([a-z ]+)$/.exec(sentences[0])?.[1];
    const what = sentences[1] === 'The room is bare' ? [] : /^You see (.+)$/.exec(sentences[1] ?? '')?.[1];
    const seen = typeof what === 'string' ? listed(what) : what;
    if (room === undefined || seen == null) continue;
    const view: RoomView = { room, seen, holds: [], open: [], locked: [] };
    let k = 2;
    for (let h; (h = /^The ([a-z ]+?) holds (.+)$/.exec(sentences[k] ?? '')); k++) {
      const items = listed(h[2]);
      if (!items) break;
      view.holds.push({ holder: h[1], items });
    }
    const doors = /^(?:A door leads|Doors lead) to (.+)$/.exec(sentences[k] ?? '');
    if (doors) {
      view.open = splitAnd(doors[1]).map((d) => d.replace(/^the /, ''));
      k++;
    }
    for (let d; (d = /^The door to the ([a-z ]+) is locked$/.exec(sentences[k] ?? '')); k++) view.locked.push(d[1]);
    views.push(view);
  }
  return views;
}

const sameList = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((x, i) => x === b[i]);

/**
 * What an observation says of the world that holds whatever was played before: a room as it looked, and
 * what other answers of the environment (src/envs/builtin/engine.ts) name with the world's own words.
 * Answers that echo the agent's words ("You don't see a ... here.") say nothing and are not read.
 */
export type Fact =
  | { kind: 'room'; view: RoomView }
  /** Things that can be carried, in the world's order where `ordered` ("You carry ...", "It holds ..."). */
  | { kind: 'portable'; items: Listed[]; ordered: boolean }
  /** "You put the x in the y.", "You take the x from the y.": y stands where it is. */
  | { kind: 'fixed'; name: string }
  /** "You open the x.": x is a container with a lid. */
  | { kind: 'openable'; name: string }
  | { kind: 'note'; says: string }
  /** "Nothing happens. The lamp needs a bulb." */
  | { kind: 'needs'; device: string; part: string }
  /** "The battery does not fit in the lamp." */
  | { kind: 'misfit'; item: string; device: string }
  /** "You unlock the door to the attic with the red key." */
  | { kind: 'unlocked'; room: string; key: string };

/** Every fact `text` states (room descriptions, then the other answers sentence by sentence). */
export function observationFacts(text: string): Fact[] {
  const facts: Fact[] = roomViews(text).map((view) => ({ kind: 'room' as const, view }));
  const note = /\bThe note says: (.+)$/.exec(text);
  if (note) facts.push({ kind: 'note', says: note[1] });
  const sentences = text.split(/\.(?: |$)/);
  const name = '([a-z]+(?: [a-z]+)?)';
  sentences.forEach((x, i) => {
    let m: RegExpExecArray | null;
    if ((m = new RegExp(`^You take the ${name}(?: from the ${name})?$`).exec(x))) {
      facts.push({ kind: 'portable', items: [{ name: m[1], tag: '' }], ordered: false });
      if (m[2]) facts.push({ kind: 'fixed', name: m[2] });
    } else if ((m = new RegExp(`^You put the ${name} (?:in|on) the ${name}$`).exec(x))) {
      facts.push({ kind: 'portable', items: [{ name: m[1], tag: '' }], ordered: false }, { kind: 'fixed', name: m[2] });
    } else if ((m = new RegExp(`^You drop the ${name}$`).exec(x))) {
      facts.push({ kind: 'portable', items: [{ name: m[1], tag: '' }], ordered: false });
    } else if ((m = new RegExp(`^You open the ${name}$`).exec(x))) {
      facts.push({ kind: 'openable', name: m[1] });
      const inside = /^It holds (.+)$/.exec(sentences[i + 1] ?? '');
      const items = inside ? listed(inside[1]) : null;
      if (items) facts.push({ kind: 'portable', items, ordered: true });
    } else if ((m = /^You carry (.+)$/.exec(x))) {
      const items = listed(m[1]);
      if (items) facts.push({ kind: 'portable', items, ordered: true });
    } else if ((m = new RegExp(`^The ${name} needs an? ([a-z]+)$`).exec(x)) && sentences[i - 1] === 'Nothing happens') {
      facts.push({ kind: 'needs', device: m[1], part: m[2] });
    } else if ((m = new RegExp(`^The ${name} does not fit in the ${name}$`).exec(x))) {
      facts.push({ kind: 'misfit', item: m[1], device: m[2] });
    } else if ((m = new RegExp(`^You unlock the door to the ${name} with the ${name}$`).exec(x))) {
      facts.push({ kind: 'unlocked', room: m[1], key: m[2] });
    }
  });
  return facts;
}

/**
 * Whether `view` can be a room of the world `layout` describes, in some state that play reaches: the room is
 * one of its rooms; its doors, in the world's order, lead where the view says, and a door shown locked is one
 * that starts locked; the things it cannot carry that stand in that room are listed, and no others; what is
 * listed is of that world, in the world's order, with the state words its kind shows.
 */
function roomFits(view: RoomView, layout: Layout): boolean {
  const r = layout.rooms.get(view.room);
  if (!r) return false;
  const shown = [...view.open, ...view.locked];
  if (shown.length !== r.doors.length || !r.doors.every((d) => shown.includes(d))) return false;
  if (
    !sameList(
      view.open,
      r.doors.filter((d) => view.open.includes(d)),
    )
  )
    return false;
  if (
    !sameList(
      view.locked,
      r.doors.filter((d) => view.locked.includes(d)),
    )
  )
    return false;
  if (view.locked.some((d) => !r.locked.has(d))) return false;
  if (!listedFits(view.seen, layout, true)) return false;
  if (
    !sameList(
      view.seen.filter((x) => !layout.things.get(x.name)!.portable).map((x) => x.name),
      r.fixed,
    )
  )
    return false;
  return view.holds.every((h) => {
    const holder = view.seen.find((x) => x.name === h.holder);
    return (
      holder !== undefined &&
      holder.tag !== 'closed' &&
      listedFits(h.items, layout, true) &&
      h.items.every((x) => layout.things.get(x.name)!.portable)
    );
  });
}

/** Every listed thing is of the world, with a state word its kind shows, and (`ordered`) in the world's order. */
function listedFits(xs: readonly Listed[], layout: Layout, ordered: boolean): boolean {
  return xs.every((x, i) => {
    const t = layout.things.get(x.name);
    return t !== undefined && t.tags.includes(x.tag) && (!ordered || i === 0 || layout.things.get(xs[i - 1].name)!.index < t.index);
  });
}

/**
 * Whether `fact` can hold in some state of the world `layout` describes that play reaches. Only what never
 * changes is checked (rooms, doors and where they lead, what stands where, what can be carried, a device's
 * part, a note's words; a door is only ever unlocked), so the true world always fits (test/oracle-writer.test.ts
 * plays the built-in episodes to check it).
 */
export function fits(fact: Fact, layout: Layout): boolean {
  const thing = (name: string) => layout.things.get(name);
  switch (fact.kind) {
    case 'room':
      return roomFits(fact.view, layout);
    case 'portable':
      return listedFits(fact.items, layout, fact.ordered) && fact.items.every((x) => thing(x.name)!.portable);
    case 'fixed':
      return thing(fact.name)?.portable === false;
    case 'openable':
      return thing(fact.name)?.openable === true;
    case 'note':
      return [...layout.things.values()].some((t) => t.kind === 'note' && t.text !== undefined && fact.says.startsWith(t.text));
    case 'needs':
      return thing(fact.device)?.kind === 'device' && thing(fact.device)?.needs === fact.part;
    case 'misfit': {
      const [item, device] = [thing(fact.item), thing(fact.device)];
      return item?.portable === true && device?.kind === 'device' && !(item.part && item.noun === device.needs);
    }
    case 'unlocked':
      return thing(fact.key)?.noun === 'key' && [...layout.rooms.values()].some((r) => r.locked.has(fact.room));
  }
}

/** The observations a reflection prompt shows: each step's, and the final one. */
function shownObservations(prompt: string): string[] {
  const steps = [...prompt.matchAll(/^Step \d+: you saw "(.*)" and did "(?:.*)"\.$/gm)].map((m) => m[1]);
  const final = /^Final observation: "(.*)"\. Final score: /m.exec(prompt)?.[1];
  return final === undefined ? steps : [...steps, final];
}

/**
 * Where a reflection prompt's episode was found: by its task text alone (`task`), by the first observation
 * (`first-observation`: step 1's, or the line under the task), or (`consistent`) as the candidates with its task
 * text whose world fits every fact the prompt's observations state (`observationFacts`: the rooms they describe,
the things they name), all with the same plan from the start;
 * `ambiguous`: several fit, with different plans; `unplaced`: none fits, or no episode has the task text.
 */
export type Placement =
  { how: 'task' | 'first-observation' | 'consistent'; episodes: Episode[] } | { how: 'ambiguous' | 'unplaced'; episodes: Episode[] };

/** The episode of a reflection prompt; `consistency: false` places as the writer first did (task text, then first observation). */
export function place(index: Map<string, Episode[]>, prompt: string, o: { consistency: boolean } = { consistency: true }): Placement {
  const task = /^Task: (.*)$/m.exec(prompt)?.[1];
  const candidates = task === undefined ? [] : (index.get(task) ?? []);
  if (candidates.length === 1) return { how: 'task', episodes: candidates };
  // The first observation: step 1's, else the line under the task (an episode's description that names where it starts).
  const first = /^Step 1: you saw "(.*)" and did "/m.exec(prompt)?.[1] ?? /^Task: .*\n(?!Your trajectory)(.+)$/m.exec(prompt)?.[1];
  const exact = candidates.filter((c) => c.firstObservation === first);
  // An agent's step 1 may show the observation inside its message ("Task: ...", then it, then the valid actions).
  const within = candidates.filter((c) => first !== undefined && first.includes(c.firstObservation));
  const found = exact.length === 1 ? exact : within;
  if (found.length === 1) return { how: 'first-observation', episodes: found };
  if (!o.consistency || candidates.length === 0) return { how: 'unplaced', episodes: [] };
  const facts = shownObservations(prompt).flatMap(observationFacts);
  const fitting = candidates.filter((c) => facts.every((f) => fits(f, c.layout)));
  if (fitting.length === 0) return { how: 'unplaced', episodes: [] };
  const same = fitting.every((c) => sameList(c.plan, fitting[0].plan));
  return { how: same ? 'consistent' : 'ambiguous', episodes: fitting };
}

/** The tip for a reflection prompt, or '' where the episode cannot be placed (or its plan is not one). */
export async function writeTip(index: Map<string, Episode[]>, prompt: string): Promise<string> {
  const p = place(index, prompt);
  if (p.how === 'ambiguous' || p.how === 'unplaced') return '';
  const actions = p.episodes[0].plan;
  if (actions.length === 0) return '';
  const task = /^Task: (.*)$/m.exec(prompt)![1];
  const words = `To ${task.replace(/\.$/, '')}: ${actions.join(', then ')}.`.split(' ');
  return words.length <= MAX_WORDS ? words.join(' ') : `${words.slice(0, MAX_WORDS).join(' ')} ...`;
}

export interface OracleWriter {
  url: string;
  /** Prompts answered, and those answered with a tip. */
  stats(): { asked: number; written: number };
  close(): Promise<void>;
}

/** Starts the writer on 127.0.0.1:`port` (0: a free port) for the built-in tasks `tasks` (null: all). */
export async function startOracleWriter(o: { port: number; tasks: string[] | null }): Promise<OracleWriter> {
  const index = await indexEpisodes(o.tasks);
  let asked = 0;
  let written = 0;
  let queue = Promise.resolve();
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c));
    req.on('end', () => {
      const answer = (status: number, json: unknown) => {
        res.writeHead(status, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(json));
      };
      if (req.method === 'GET' && req.url?.endsWith('/models'))
        return answer(200, { object: 'list', data: [{ id: 'oracle-writer', object: 'model', owned_by: 'empo2-stand-in' }] });
      if (req.method !== 'POST' || !req.url?.endsWith('/chat/completions'))
        return answer(404, { error: { message: `no route ${req.method} ${req.url}`, type: 'not_found_error', param: null, code: null } });
      let messages: { role: string; content: string }[];
      try {
        messages = (JSON.parse(body) as { messages: { role: string; content: string }[] }).messages;
      } catch (e) {
        return answer(400, {
          error: { message: `not JSON: ${(e as Error).message}`, type: 'invalid_request_error', param: null, code: null },
        });
      }
      const prompt = [...messages].reverse().find((m) => m.role === 'user')?.content ?? '';
      // Answered in the order they came (the counts and the answer ids follow it).
      queue = queue.then(async () => {
        asked++;
        const tip = await writeTip(index, typeof prompt === 'string' ? prompt : '');
        if (tip) written++;
        answer(200, {
          id: `chatcmpl-oracle-${asked}`,
          object: 'chat.completion',
          created: Math.floor(Date.now() / 1000),
          model: 'oracle-writer',
          system_fingerprint: 'stand-in: the built-in environment solver, not a model',
          choices: [{ index: 0, message: { role: 'assistant', content: tip }, finish_reason: 'stop', logprobs: null }],
          usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
        });
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(o.port, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    stats: () => ({ asked, written }),
    close: async () => {
      await new Promise((r) => server.close(r));
    },
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { port: { type: 'string', default: '8089' }, tasks: { type: 'string' } } });
  const w = await startOracleWriter({ port: Number(values.port), tasks: values.tasks ? values.tasks.split(',') : null });
  console.log(`oracle writer (a STAND-IN: tips from the built-in solver, not a model) at ${w.url}`);
  process.on('SIGINT', () => void w.close().then(() => process.exit(0)));
}
