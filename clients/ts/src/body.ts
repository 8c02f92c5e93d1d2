// The bodies of provider responses (client/body.go): a non-2xx response's
// body is read, bounded, and put back so that the caller can still read it.

/** Reads at most limit bytes of a response body and cancels the rest; a stalled body ends with signal. */
export async function readErrorBody(resp: Response, limit: number, signal?: AbortSignal): Promise<Uint8Array> {
  if (!resp.body) return new Uint8Array();
  const reader = resp.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  const onAbort = () => { void reader.cancel().catch(() => {}); };
  if (signal?.aborted) onAbort(); // a listener added now would never fire
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    while (size < limit) {
      const { done, value } = await reader.read();
      if (done) break;
      const take = value.subarray(0, Math.min(value.length, limit - size));
      chunks.push(take);
      size += take.length;
    }
  } catch {
    // a short read still classifies by status
  } finally {
    signal?.removeEventListener("abort", onAbort);
    void reader.cancel().catch(() => {});
  }
  const out = new Uint8Array(size);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/** The response with its body replaced by the bytes read, so the caller can still read it. */
export function rebuild(resp: Response, body: Uint8Array): Response {
  const nullBody = [101, 103, 204, 205, 304].includes(resp.status);
  try {
    const headers = new Headers(resp.headers);
    headers.delete("content-encoding");
    headers.delete("content-length");
    return new Response(nullBody ? null : body, { status: resp.status, statusText: resp.statusText, headers });
  } catch {
    return resp;
  }
}

/** Whether a request body is a stream, which can be sent once only. */
export function isStream(b: unknown): boolean {
  return typeof b === "object" && b !== null && typeof (b as ReadableStream).getReader === "function";
}
