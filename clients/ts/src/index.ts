// @cooldownd/client: the TypeScript client of cooldownd.
export {
  Client, allowed, classifyRpc, readErrorBody, sleep,
  DefaultAdmitTimeoutMs, DefaultBackoffBaseMs, DefaultBackoffCapMs, DefaultDegradeAfter, DefaultDegradeWindowMs,
  DefaultMaxRetries, DefaultProbePollMs, DefaultServiceRetryMs, MaxCandidates, MaxEndpoints, MaxReporterLen, OverloadFloorMs,
  type Admission, type AttemptContext, type ClientOptions, type FailMode, type GuardOptions, type Stats,
} from "./client.js";
export { Conn, MaxLabelLen, type ConnectionSpec } from "./conn.js";
export { DeniedError, GuardError, InvalidConnError, RejectedError, UnavailableError } from "./errors.js";
export {
  classify, classifyError, errorChain, parseErrorBody, sanitizeCode, quotaCodes,
  DefaultMaxBodyBytes, DefaultMaxServerDelayMs, type Classification, type ResponseLike, type Rules,
} from "./classify.js";
export {
  MaxHintMs, parseRetryAfter, proactiveDelay, serverDelay, shouldRetryHeader, parseResetDuration, type HeaderGetter,
} from "./headers.js";
export {
  Cause, Decision, DenyReason, Outcome, Override, Phase, State, defaultPolicy, validatePolicy, outcomeName, reasonName, perCall,
  ThrottleRetryAfterMs,
  type Policy, type Verdict, type Lease, type BreakerEvent, type BreakerReport, type Attempt, type Fleet, type FleetCounts, type Reporter,
} from "./breaker.js";
export { deriveId, idHex, normalizeEndpoint, parseId, InvalidConnectionError, type ConnectionInput } from "./keys.js";
export { consoleLogger, silentLogger, type Logger } from "./log.js";
export type { QueueStats } from "./queue.js";
export type { MirrorStats } from "./mirror.js";
export * as wire from "./gen/v1/cooldown_pb.js";
