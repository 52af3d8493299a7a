/** The closed word lists worlds are drawn from. Small on purpose: the policy's tokenizer is trained on this text. */

export const ROOMS = [
  'kitchen',
  'hallway',
  'study',
  'bedroom',
  'garage',
  'bathroom',
  'cellar',
  'attic',
  'pantry',
  'office',
  'library',
  'porch',
] as const;

export const COLOURS = ['red', 'blue', 'green', 'yellow', 'white', 'black'] as const;

/** Containers with a lid (closed at the start). */
export const CONTAINERS = ['box', 'drawer', 'chest', 'cupboard', 'crate', 'cabinet', 'trunk'] as const;

/** Small portable things; in a world they always carry a colour ("red ball"). */
export const ITEMS = ['key', 'coin', 'ball', 'cup', 'book', 'ring', 'spoon', 'glove', 'candle', 'hat'] as const;

/** Parts that power devices. */
export const PARTS = ['battery', 'fuse', 'bulb'] as const;

export const DEVICES = ['lamp', 'radio', 'fan', 'clock'] as const;

export const VESSELS = ['kettle', 'pot'] as const;

/** Every word a thing or room name can contain; free text made of other words is never echoed back. */
export const WORDS: ReadonlySet<string> = new Set<string>([
  ...ROOMS,
  ...COLOURS,
  ...CONTAINERS,
  ...ITEMS,
  ...PARTS,
  ...DEVICES,
  ...VESSELS,
  'basket',
  'stove',
  'sink',
  'note',
  'door',
]);
