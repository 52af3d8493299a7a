/**
 * The world model of the built-in text environment: rooms joined by doors, and things
 * (items, containers, devices, fixtures, notes) that sit in a room, inside another thing,
 * or in the player's hands. Everything here is plain data plus small queries; the
 * actions live in engine.ts and the task families in families.ts.
 */

export type Kind = 'item' | 'container' | 'device' | 'stove' | 'sink' | 'note';

/** Where a thing is: on the floor of a room, inside (or on) another thing, or carried. */
export type Loc = { room: string } | { in: string } | { held: true };

export interface Thing {
  /** Unique display name, also the name used in actions: "red box", "kettle". */
  name: string;
  /** Head noun: "box". */
  noun: string;
  colour?: string;
  kind: Kind;
  loc: Loc;
  portable: boolean;
  /** Containers with a lid; a basket is an always-open container. */
  openable?: boolean;
  open?: boolean;
  /** Devices and the stove. */
  on?: boolean;
  /** A device works only with this part (a noun: "battery") inside it. */
  needs?: string;
  /** A part that can power a device (battery, fuse, bulb). */
  part?: boolean;
  /** Can be filled with water at a sink. */
  vessel?: boolean;
  full?: boolean;
  /** Opening it fails the task (the wrong boxes of the clue family). */
  trap?: boolean;
  /** What a note says. */
  text?: string;
}

export interface Door {
  a: string;
  b: string;
  locked: boolean;
  /** Colour of the key that opens it. */
  lock?: string;
}

export interface Flags {
  noteRead?: boolean;
  /** Name of the vessel whose water boiled. */
  boiled?: string;
  /** Set when the episode failed for good; the text says why. */
  failed?: string;
}

export class World {
  readonly byName = new Map<string, Thing>();

  constructor(
    readonly task: string,
    readonly description: string,
    readonly rooms: string[],
    readonly doors: Door[],
    readonly things: Thing[],
    public player: string,
    /** Family-specific names: target thing, goal room, device, ... */
    readonly goal: Readonly<Record<string, string>>,
    public flags: Flags = {},
  ) {
    for (const t of things) {
      if (this.byName.has(t.name)) throw new Error(`duplicate thing name: ${t.name}`);
      this.byName.set(t.name, t);
    }
  }

  clone(): World {
    return new World(
      this.task,
      this.description,
      this.rooms,
      this.doors.map((d) => ({ ...d })),
      this.things.map((t) => ({ ...t, loc: { ...t.loc } as Loc })),
      this.player,
      this.goal,
      { ...this.flags },
    );
  }

  get(name: string): Thing {
    const t = this.byName.get(name);
    if (!t) throw new Error(`no thing named ${name}`);
    return t;
  }

  /** Rooms joined to `room` by a door, in the world's door order. */
  neighbours(room: string): { room: string; door: Door }[] {
    const out: { room: string; door: Door }[] = [];
    for (const d of this.doors) {
      if (d.a === room) out.push({ room: d.b, door: d });
      else if (d.b === room) out.push({ room: d.a, door: d });
    }
    return out;
  }

  door(a: string, b: string): Door | undefined {
    return this.doors.find((d) => (d.a === a && d.b === b) || (d.a === b && d.b === a));
  }

  /** The room a thing is in (a carried thing is in the player's room). */
  roomOf(t: Thing): string {
    let cur = t;
    for (let guard = 0; guard < 16; guard++) {
      const loc = cur.loc;
      if ('room' in loc) return loc.room;
      if ('held' in loc) return this.player;
      cur = this.get(loc.in);
    }
    throw new Error(`containment loop at ${t.name}`);
  }

  /** The thing directly holding `t`, if any. */
  holder(t: Thing): Thing | undefined {
    return 'in' in t.loc ? this.get(t.loc.in) : undefined;
  }

  held(t: Thing): boolean {
    return 'held' in t.loc;
  }

  /** Things directly inside (or on) `t`. */
  contents(t: Thing): Thing[] {
    return this.things.filter((x) => 'in' in x.loc && x.loc.in === t.name);
  }

  inventory(): Thing[] {
    return this.things.filter((x) => 'held' in x.loc);
  }

  /** Things on the floor of the room. */
  inRoom(room: string): Thing[] {
    return this.things.filter((x) => 'room' in x.loc && x.loc.room === room);
  }

  /** A closed lid hides what is inside; devices, stoves and baskets show what they hold. */
  showsContents(t: Thing): boolean {
    return !t.openable || !!t.open;
  }

  /** The player can see and reach `t`: carried, on the floor here, or inside something open here. */
  visible(t: Thing): boolean {
    let cur = t;
    for (let guard = 0; guard < 16; guard++) {
      const loc = cur.loc;
      if ('held' in loc) return true;
      if ('room' in loc) return loc.room === this.player;
      const h = this.get(loc.in);
      if (!this.showsContents(h)) return false;
      cur = h;
    }
    return false;
  }

  visibleThings(): Thing[] {
    return this.things.filter((t) => this.visible(t));
  }

  /** Shortest route of rooms from `from` to `to` (excluding `from`) through unlocked doors, or null. */
  route(from: string, to: string): string[] | null {
    if (from === to) return [];
    const prev = new Map<string, string>([[from, from]]);
    const queue = [from];
    while (queue.length) {
      const r = queue.shift()!;
      for (const { room, door } of this.neighbours(r)) {
        if (prev.has(room) || door.locked) continue;
        prev.set(room, r);
        if (room === to) {
          const path = [to];
          for (let c = r; c !== from; c = prev.get(c)!) path.unshift(c);
          return path;
        }
        queue.push(room);
      }
    }
    return null;
  }
}

// ---------------------------------------------------------------- text helpers

export function article(phrase: string): string {
  return /^[aeiou]/.test(phrase) ? `an ${phrase}` : `a ${phrase}`;
}

export function joinAnd(xs: string[]): string {
  if (xs.length <= 1) return xs.join('');
  return `${xs.slice(0, -1).join(', ')} and ${xs[xs.length - 1]}`;
}

/** How a thing is named in a list: "a closed red box", "a lamp (off)", "a kettle (full)". */
export function listing(t: Thing): string {
  if (t.kind === 'container' && t.openable) return article(`${t.open ? 'open' : 'closed'} ${t.name}`);
  if (t.kind === 'device' || t.kind === 'stove') return `${article(t.name)} (${t.on ? 'on' : 'off'})`;
  if (t.vessel && t.full) return `${article(t.name)} (full)`;
  return article(t.name);
}

/** "The red box holds a key.", or "" when it holds nothing. */
export function contentsSentence(w: World, t: Thing): string {
  const inside = w.contents(t);
  return inside.length ? `The ${t.name} holds ${joinAnd(inside.map(listing))}.` : '';
}

/** The room as the player sees it, in two to four short sentences. */
export function describeRoom(w: World): string {
  const here = w.inRoom(w.player);
  const parts = [`You are in the ${w.player}.`];
  parts.push(here.length ? `You see ${joinAnd(here.map(listing))}.` : 'The room is bare.');
  for (const t of here) {
    const s = w.showsContents(t) ? contentsSentence(w, t) : '';
    if (s) parts.push(s);
  }
  const nb = w.neighbours(w.player);
  const open = nb.filter((n) => !n.door.locked).map((n) => `the ${n.room}`);
  if (open.length) parts.push(`${open.length === 1 ? 'A door leads' : 'Doors lead'} to ${joinAnd(open)}.`);
  for (const n of nb) if (n.door.locked) parts.push(`The door to the ${n.room} is locked.`);
  return parts.join(' ');
}
