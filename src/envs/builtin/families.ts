/**
 * The task families of the built-in environment. Each family generates worlds from a PRNG,
 * scores them with latched milestones (points summing below 100; the last milestone is
 * success = 100), and carries an oracle: a policy that reads the hidden state and returns
 * the next action toward the goal.
 */
import { Rng } from './rng.ts';
import { COLOURS, CONTAINERS, DEVICES, ITEMS, PARTS, ROOMS, VESSELS } from './vocab.ts';
import { World, article, type Door, type Loc, type Thing } from './world.ts';

export interface Milestone {
  points: number;
  test(w: World): boolean;
}

export interface Family {
  id: string;
  maxSteps: number;
  /** One world from the PRNG stream (called again when the oracle would need too many steps). */
  generate(rng: Rng): World;
  /** Latched once reached; the last one is success and sets the score to 100. */
  milestones: Milestone[];
  /** Oracle: the next action from the current hidden state, or null when there is nothing to do. */
  next(w: World): string | null;
}

// ---------------------------------------------------------------- world building

/** Most top-level things a room gets from clutter (fixtures and goal things may add to it). */
const ROOM_CAPACITY = 3;

class Gen {
  readonly rooms: string[];
  readonly doors: Door[] = [];
  readonly things: Thing[] = [];
  private readonly used = new Set<string>();

  /** `n` rooms (those in `must` among them, none from `avoid`) joined as a random tree, sometimes with one extra door. */
  constructor(
    readonly rng: Rng,
    n: number,
    must: readonly string[] = [],
    avoid: readonly string[] = [],
  ) {
    const others = rng.shuffle(ROOMS.filter((r) => !must.includes(r) && !avoid.includes(r)));
    this.rooms = rng.shuffle([...must, ...others.slice(0, n - must.length)]);
    for (let i = 1; i < n; i++) this.doors.push({ a: this.rooms[rng.int(0, i - 1)], b: this.rooms[i], locked: false });
    if (n >= 4 && rng.chance(0.3)) {
      const [a, b] = rng.sample(this.rooms, 2);
      if (!this.doors.some((d) => (d.a === a && d.b === b) || (d.a === b && d.b === a))) {
        this.doors.push({ a, b, locked: false });
      }
    }
  }

  roomsBut(...not: string[]): string[] {
    return this.rooms.filter((r) => !not.includes(r));
  }

  add(t: Thing): Thing {
    if (this.used.has(t.name)) throw new Error(`duplicate name ${t.name}`);
    this.used.add(t.name);
    this.things.push(t);
    return t;
  }

  /** A closed container with a fresh "colour noun" name. */
  container(room: string, avoidNouns: readonly string[] = []): Thing {
    const nouns = CONTAINERS.filter((c) => !avoidNouns.includes(c));
    for (;;) {
      const noun = this.rng.pick(nouns);
      const colour = this.rng.pick(COLOURS);
      const name = `${colour} ${noun}`;
      if (!this.used.has(name)) {
        return this.add({ name, noun, colour, kind: 'container', loc: { room }, portable: false, openable: true, open: false });
      }
    }
  }

  /** A portable item; named "colour noun" when a colour is given. */
  item(noun: string, loc: Loc, colour?: string, extra: Partial<Thing> = {}): Thing {
    return this.add({ name: colour ? `${colour} ${noun}` : noun, noun, colour, kind: 'item', loc, portable: true, ...extra });
  }

  /** A fresh colour for `noun` ("red ball" not yet used). */
  colourFor(noun: string, not: readonly string[] = []): string {
    const free = COLOURS.filter((c) => !not.includes(c) && !this.used.has(`${c} ${noun}`));
    return this.rng.pick(free);
  }

  /** Put `make(loc)` inside a new closed container in `room`. */
  hidden(room: string, make: (loc: Loc) => Thing): Thing {
    const c = this.container(room);
    return make({ in: c.name });
  }

  topLevel(room: string): number {
    return this.things.filter((t) => 'room' in t.loc && t.loc.room === room).length;
  }

  /** `k` extra containers in rooms that still have space, most holding a distractor item. */
  clutter(
    k: number,
    opts: { avoidNouns?: readonly string[]; avoidContainers?: readonly string[]; avoidRooms?: readonly string[] } = {},
  ): void {
    const nouns = ITEMS.filter((x) => !(opts.avoidNouns ?? []).includes(x));
    for (let i = 0; i < k; i++) {
      const rooms = this.rooms.filter((r) => !(opts.avoidRooms ?? []).includes(r) && this.topLevel(r) < ROOM_CAPACITY);
      if (!rooms.length) return;
      const c = this.container(this.rng.pick(rooms), opts.avoidContainers);
      if (this.rng.chance(0.6)) {
        const noun = this.rng.pick(nouns);
        this.item(noun, { in: c.name }, this.colourFor(noun));
      }
    }
  }

  world(task: string, description: string, player: string, goal: Record<string, string>): World {
    return new World(task, description, this.rooms, this.doors, this.things, player, goal);
  }
}

// ---------------------------------------------------------------- oracle helpers

/** First step of the shortest open route to `room`; null when already there or unreachable. */
function hop(w: World, room: string): string | null {
  const r = w.route(w.player, room);
  return r && r.length ? `go to ${r[0]}` : null;
}

/** `action` once the player is in `room`, else the next step toward it. */
function inRoom(w: World, room: string, action: string): string | null {
  return w.player === room ? action : hop(w, room);
}

/** Next action to get `t` into the player's hands: walk there, open its lid, take it. Null if held. */
function acquire(w: World, t: Thing): string | null {
  if (w.held(t)) return null;
  const room = w.roomOf(t);
  if (w.player !== room) return hop(w, room);
  if (w.visible(t)) return `take ${t.name}`;
  let lid: Thing | undefined;
  for (let h = w.holder(t); h; h = w.holder(h)) if (!w.showsContents(h)) lid = h;
  return lid ? `open ${lid.name}` : null;
}

// ---------------------------------------------------------------- families

const fetch: Family = {
  id: 'fetch',
  maxSteps: 25,
  generate(rng) {
    const g = new Gen(rng, rng.int(3, 6));
    const start = rng.pick(g.rooms);
    const goal = rng.pick(g.rooms);
    const where = rng.pick(g.roomsBut(start, goal));
    const noun = rng.pick(ITEMS);
    const target = g.hidden(where, (loc) => g.item(noun, loc, g.colourFor(noun)));
    if (rng.chance(0.7)) {
      g.hidden(rng.pick(g.roomsBut(where)), (loc) => g.item(noun, loc, g.colourFor(noun)));
    }
    g.clutter(rng.int(1, 3), { avoidNouns: [noun] });
    return g.world('fetch', `Find the ${target.name} and bring it to the ${goal}.`, start, { target: target.name, room: goal });
  },
  milestones: [
    { points: 20, test: (w) => w.visible(w.get(w.goal.target)) },
    { points: 30, test: (w) => w.held(w.get(w.goal.target)) },
    { points: 100, test: (w) => w.held(w.get(w.goal.target)) && w.player === w.goal.room },
  ],
  next(w) {
    const t = w.get(w.goal.target);
    return acquire(w, t) ?? hop(w, w.goal.room);
  },
};

const power: Family = {
  id: 'power',
  maxSteps: 30,
  generate(rng) {
    const g = new Gen(rng, rng.int(3, 6));
    const device = rng.pick(DEVICES);
    const part = rng.pick(PARTS);
    const devRoom = rng.pick(g.rooms);
    g.add({ name: device, noun: device, kind: 'device', loc: { room: devRoom }, portable: false, on: false, needs: part });
    g.hidden(rng.pick(g.roomsBut(devRoom)), (loc) => g.item(part, loc, undefined, { part: true }));
    for (const other of PARTS) {
      if (other === part || !rng.chance(0.6)) continue;
      const room = rng.pick(g.rooms);
      if (rng.chance(0.5)) g.item(other, { room }, undefined, { part: true });
      else g.hidden(room, (loc) => g.item(other, loc, undefined, { part: true }));
    }
    if (rng.chance(0.4)) {
      const other = rng.pick(DEVICES.filter((d) => d !== device));
      g.add({
        name: other,
        noun: other,
        kind: 'device',
        loc: { room: rng.pick(g.rooms) },
        portable: false,
        on: false,
        needs: rng.pick(PARTS),
      });
    }
    g.clutter(rng.int(0, 2));
    return g.world('power', `Find ${article(part)}, put it in the ${device} and turn on the ${device}.`, rng.pick(g.rooms), {
      device,
      part,
    });
  },
  milestones: [
    { points: 10, test: (w) => w.visible(w.get(w.goal.part)) },
    { points: 25, test: (w) => w.held(w.get(w.goal.part)) },
    { points: 30, test: (w) => w.holder(w.get(w.goal.part))?.name === w.goal.device },
    { points: 100, test: (w) => !!w.get(w.goal.device).on },
  ],
  next(w) {
    const d = w.get(w.goal.device);
    const p = w.get(w.goal.part);
    if (d.on) return null;
    const room = w.roomOf(d);
    if (w.holder(p) === d) return inRoom(w, room, `turn on ${d.name}`);
    if (w.held(p)) return inRoom(w, room, `put ${p.name} in ${d.name}`);
    return acquire(w, p);
  },
};

/** The full vessel sits on the stove. */
function fullOnStove(w: World): boolean {
  const v = w.get(w.goal.vessel);
  return !!v.full && w.holder(v)?.kind === 'stove';
}

const boil: Family = {
  id: 'boil',
  maxSteps: 35,
  generate(rng) {
    const sinkInKitchen = rng.chance(0.5);
    const g = new Gen(rng, rng.int(3, 6), sinkInKitchen ? ['kitchen'] : ['kitchen', 'bathroom']);
    g.add({ name: 'stove', noun: 'stove', kind: 'stove', loc: { room: 'kitchen' }, portable: false, on: false });
    g.add({ name: 'sink', noun: 'sink', kind: 'sink', loc: { room: sinkInKitchen ? 'kitchen' : 'bathroom' }, portable: false });
    const [vessel, other] = rng.shuffle(VESSELS);
    const place = (noun: string) => {
      const room = rng.pick(g.roomsBut('kitchen'));
      if (rng.chance(0.3)) g.item(noun, { room }, undefined, { vessel: true, full: false });
      else g.hidden(room, (loc) => g.item(noun, loc, undefined, { vessel: true, full: false }));
    };
    place(vessel);
    if (rng.chance(0.4)) place(other);
    g.clutter(rng.int(0, 2));
    return g.world(
      'boil',
      `Boil water: fill the ${vessel} at the sink, put it on the stove, turn on the stove and wait.`,
      rng.pick(g.rooms),
      { vessel },
    );
  },
  milestones: [
    { points: 15, test: (w) => w.held(w.get(w.goal.vessel)) },
    { points: 20, test: (w) => !!w.get(w.goal.vessel).full },
    { points: 20, test: fullOnStove },
    { points: 20, test: (w) => fullOnStove(w) && !!w.holder(w.get(w.goal.vessel))!.on },
    { points: 100, test: (w) => w.flags.boiled === w.goal.vessel },
  ],
  next(w) {
    const v = w.get(w.goal.vessel);
    const stove = w.get('stove');
    if (w.flags.boiled === v.name) return null;
    if (w.holder(v) === stove && v.full) return inRoom(w, w.roomOf(stove), stove.on ? 'wait' : `turn on ${stove.name}`);
    if (!w.held(v)) return acquire(w, v);
    if (!v.full) return inRoom(w, w.roomOf(w.get('sink')), `fill ${v.name}`);
    return inRoom(w, w.roomOf(stove), `put ${v.name} on ${stove.name}`);
  },
};

const clue: Family = {
  id: 'clue',
  maxSteps: 30,
  generate(rng) {
    const g = new Gen(rng, rng.int(3, 6));
    const boxRoom = rng.pick(g.rooms);
    const noteRoom = rng.pick(g.roomsBut(boxRoom));
    const noun = rng.pick(ITEMS);
    const colours = rng.sample(COLOURS, 3);
    const right = rng.int(0, 2);
    colours.forEach((c, i) => {
      g.add({
        name: `${c} box`,
        noun: 'box',
        colour: c,
        kind: 'container',
        loc: { room: boxRoom },
        portable: false,
        openable: true,
        open: false,
        trap: i !== right,
      });
    });
    g.item(noun, { in: `${colours[right]} box` });
    const wrong = colours.filter((_, i) => i !== right);
    const text = rng.chance(0.5)
      ? `the ${noun} is in the ${colours[right]} box.`
      : `the ${noun} is not in the ${wrong[0]} box or the ${wrong[1]} box.`;
    g.add({ name: 'note', noun: 'note', kind: 'note', loc: { room: noteRoom }, portable: false, text });
    g.clutter(rng.int(1, 2), { avoidNouns: [noun], avoidContainers: ['box'], avoidRooms: [boxRoom] });
    return g.world(
      'clue',
      `A note tells which box holds the ${noun}. Take the ${noun}. Opening a wrong box locks all the boxes.`,
      rng.pick(g.rooms),
      { target: noun, note: 'note' },
    );
  },
  milestones: [
    { points: 30, test: (w) => !!w.flags.noteRead },
    { points: 30, test: (w) => w.visible(w.get(w.goal.target)) },
    { points: 100, test: (w) => w.held(w.get(w.goal.target)) },
  ],
  next(w) {
    if (!w.flags.noteRead) return inRoom(w, w.roomOf(w.get(w.goal.note)), `read ${w.goal.note}`);
    return acquire(w, w.get(w.goal.target));
  },
};

const unlock: Family = {
  id: 'unlock',
  maxSteps: 30,
  generate(rng) {
    const goal = rng.pick(ROOMS);
    const g = new Gen(rng, rng.int(2, 5), [], [goal]);
    const via = rng.pick(g.rooms);
    const lock = rng.pick(COLOURS);
    g.doors.push({ a: via, b: goal, locked: true, lock });
    g.rooms.push(goal);
    const start = rng.pick(g.roomsBut(goal));
    const keyRooms = g.roomsBut(goal, start);
    const key = g.hidden(rng.pick(keyRooms.length ? keyRooms : g.roomsBut(goal)), (loc) => g.item('key', loc, lock));
    if (rng.chance(0.7)) {
      g.hidden(rng.pick(g.roomsBut(goal)), (loc) => g.item('key', loc, g.colourFor('key', [lock])));
    }
    g.clutter(rng.int(0, 2), { avoidNouns: ['key'] });
    return g.world('unlock', `Find the ${key.name}, unlock the door to the ${goal} and go into the ${goal}.`, start, {
      key: key.name,
      room: goal,
      via,
    });
  },
  milestones: [
    { points: 15, test: (w) => w.visible(w.get(w.goal.key)) },
    { points: 20, test: (w) => w.held(w.get(w.goal.key)) },
    { points: 30, test: (w) => !w.door(w.goal.via, w.goal.room)!.locked },
    { points: 100, test: (w) => w.player === w.goal.room },
  ],
  next(w) {
    const goal = w.goal.room;
    if (w.player === goal) return null;
    if (!w.door(w.goal.via, goal)!.locked) return hop(w, goal);
    const key = w.get(w.goal.key);
    if (w.held(key)) return inRoom(w, w.goal.via, `unlock door to ${goal}`);
    return acquire(w, key);
  },
};

/** [item, basket] pairs of the sort family. */
function pairs(w: World): [Thing, Thing][] {
  return [
    [w.get(w.goal.item1), w.get(w.goal.basket1)],
    [w.get(w.goal.item2), w.get(w.goal.basket2)],
  ];
}

function placed(w: World, i: 0 | 1): boolean {
  const [item, basket] = pairs(w)[i];
  return w.holder(item) === basket;
}

const sort: Family = {
  id: 'sort',
  maxSteps: 40,
  generate(rng) {
    const g = new Gen(rng, rng.int(3, 5));
    const home = rng.pick(g.rooms);
    const colours = rng.sample(COLOURS, 2);
    const nouns = rng.sample(ITEMS, 2);
    const goal: Record<string, string> = {};
    colours.forEach((c, i) => {
      const basket = g.add({ name: `${c} basket`, noun: 'basket', colour: c, kind: 'container', loc: { room: home }, portable: false });
      const room = rng.pick(g.roomsBut(home));
      const make = (loc: Loc) => g.item(nouns[i], loc, c);
      const item = rng.chance(0.6) ? g.hidden(room, make) : make({ room });
      goal[`item${i + 1}`] = item.name;
      goal[`basket${i + 1}`] = basket.name;
    });
    if (rng.chance(0.5)) {
      // Same thing, swapped colour: only the colour tells the baskets apart.
      const room = rng.pick(g.roomsBut(home));
      g.hidden(room, (loc) => g.item(nouns[0], loc, colours[1]));
    }
    g.clutter(rng.int(0, 1), { avoidNouns: nouns, avoidRooms: [home] });
    return g.world(
      'sort',
      `Put the ${goal.item1} in the ${goal.basket1} and the ${goal.item2} in the ${goal.basket2}.`,
      rng.pick(g.rooms),
      goal,
    );
  },
  milestones: [
    { points: 10, test: (w) => w.held(pairs(w)[0][0]) },
    { points: 10, test: (w) => w.held(pairs(w)[1][0]) },
    { points: 30, test: (w) => placed(w, 0) },
    { points: 30, test: (w) => placed(w, 1) },
    { points: 100, test: (w) => placed(w, 0) && placed(w, 1) },
  ],
  next(w) {
    const ps = pairs(w);
    // Pick up a target that is in reach on the way, then deliver what is carried, then fetch the rest.
    for (const [item, basket] of ps) if (w.holder(item) !== basket && !w.held(item) && w.visible(item)) return `take ${item.name}`;
    for (const [item, basket] of ps) if (w.held(item)) return inRoom(w, w.roomOf(basket), `put ${item.name} in ${basket.name}`);
    for (const [item, basket] of ps) if (w.holder(item) !== basket) return acquire(w, item);
    return null;
  },
};

export const FAMILIES: readonly Family[] = [fetch, power, boil, clue, unlock, sort];

export function family(task: string): Family {
  const f = FAMILIES.find((x) => x.id === task);
  if (!f) throw new Error(`unknown builtin task "${task}" (known: ${FAMILIES.map((x) => x.id).join(', ')})`);
  return f;
}
