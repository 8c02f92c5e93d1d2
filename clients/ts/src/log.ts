/** Where the client writes its notices. Nothing logged holds a credential, a token or a full id. */
export interface Logger {
  debug(msg: string, attrs: Record<string, unknown>): void;
  info(msg: string, attrs: Record<string, unknown>): void;
  warn(msg: string, attrs: Record<string, unknown>): void;
}

/** The default: info and warn to the console, debug dropped. */
export const consoleLogger: Logger = {
  debug() {},
  info(msg, attrs) { console.info(`cooldownd-client: ${msg}`, attrs); },
  warn(msg, attrs) { console.warn(`cooldownd-client: ${msg}`, attrs); },
};

/** A logger that drops everything. */
export const silentLogger: Logger = { debug() {}, info() {}, warn() {} };
