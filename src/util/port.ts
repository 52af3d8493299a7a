/** Whether `port` can be listened on: a whole number from 0 (any free port) to 65535. */
export function isPort(port: number): boolean {
  return Number.isInteger(port) && port >= 0 && port <= 65535;
}
