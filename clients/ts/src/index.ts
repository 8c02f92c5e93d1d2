// @cooldownd/client: the TypeScript client of cooldownd.
//
// What this file exports is the package's public API (semver, CHANGELOG.md);
// api/client.api.md is its committed report and test/api.test.ts fails when
// the two differ (`npm run api:update` accepts a change on purpose). It is the
// Go client's surface in TypeScript terms: the client and its guards, the
// connection type, the errors, classification and the header rules, the
// policy's knobs and the enums they answer with. The breaker's state machine,
// the queue, the mirror and the parsing helpers stay internal. The generated
// messages of api/v1 are the `@cooldownd/client/wire` subpath
// (src/gen/v1/cooldown_pb.ts, package.json's exports).
export {
  Client, allowed, readErrorBody,
  DefaultAdmitTimeoutMs, DefaultBackoffBaseMs, DefaultBackoffCapMs, DefaultDegradeAfter, DefaultDegradeWindowMs,
  DefaultMaxRetries, DefaultProbePollMs, DefaultServiceRetryMs, MaxCandidates, MaxEndpoints, MaxReporterLen,
  type Admission, type AttemptContext, type ClientOptions, type FailMode, type GuardOptions, type Stats,
} from "./client.js";
export { Conn, MaxLabelLen, type ConnectionSpec } from "./conn.js";
export { DeniedError, GuardError, InvalidConnError, RejectedError, UnavailableError } from "./errors.js";
export {
  classify, DefaultMaxBodyBytes, DefaultMaxServerDelayMs, type Classification, type ResponseLike, type Rules,
} from "./classify.js";
export { MaxHintMs, parseRetryAfter, proactiveDelay, serverDelay, shouldRetryHeader, type HeaderGetter } from "./headers.js";
export {
  Decision, DenyReason, Outcome, defaultPolicy, validatePolicy, outcomeName, reasonName, perCall, type Policy,
} from "./breaker.js";
export { parseId, InvalidConnectionError, type ConnectionInput } from "./keys.js";
export { consoleLogger, silentLogger, type Logger } from "./log.js";
export type { QueueStats } from "./queue.js";
export type { MirrorStats } from "./mirror.js";
export { TracerName, type TracerProviderLike } from "./otel.js";
