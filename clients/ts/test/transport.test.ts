// The default transport of an endpoint (src/transport.ts): unary calls over
// HTTP/1.1 from a keep-alive pool, streams over h2c, as the Go client's
// (client/transport_split_test.go).

import { test } from "node:test";
import assert from "node:assert/strict";
import * as http from "node:http";
import * as http2 from "node:http2";
import { connect, createServer, type AddressInfo, type Socket } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import { CooldownService, Decision } from "../src/gen/v1/cooldown_pb.js";
import { Endpoints, httpPlan } from "../src/transport.js";
import { silentLogger } from "../src/log.js";

/** Serves CooldownService over HTTP/1.1 and h2c (prior knowledge) on one port, as cooldownd does, recording each call's HTTP version. */
async function protoServer(): Promise<{ url: string; seen: Array<[string, string]>; sockets: Set<Socket>; close(): Promise<void> }> {
  const seen: Array<[string, string]> = [];
  const adapter = connectNodeAdapter({
    routes: (router) => router.service(CooldownService, {
      admit: () => ({ decision: Decision.ALLOW }),
      async *watchConnections() {},
    }),
  });
  const handler = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => {
    seen.push([req.url ?? "", req.httpVersion]);
    adapter(req as http.IncomingMessage, res as http.ServerResponse);
  };
  const h1 = http.createServer(handler);
  const h2 = http2.createServer(handler);
  const listen = async (s: http.Server | http2.Http2Server) => {
    await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
    return (s.address() as AddressInfo).port;
  };
  const [h1Port, h2Port] = [await listen(h1), await listen(h2)];
  // One port for both, as cooldownd's: the first bytes of a connection
  // (the HTTP/2 preface or an HTTP/1.1 request line) pick the server it
  // is piped to. Node's HTTP/2 server reads its socket natively, so the
  // bytes are piped, not handed over.
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    socket.once("data", (first) => {
      const up = connect(first.subarray(0, 3).toString() === "PRI" ? h2Port : h1Port, "127.0.0.1");
      up.on("error", () => socket.destroy());
      socket.on("close", () => up.destroy());
      up.on("close", () => socket.destroy());
      up.write(first);
      socket.pipe(up).pipe(socket);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url, seen, sockets,
    close: async () => {
      for (const s of sockets) s.destroy();
      h1.closeAllConnections();
      await Promise.all([
        new Promise<void>((resolve) => server.close(() => resolve())),
        new Promise<void>((resolve) => h1.close(() => resolve())),
        new Promise<void>((resolve) => h2.close(() => resolve())),
      ]);
    },
  };
}

test("the default transport sends unary calls over HTTP/1.1 and streams over h2c", async () => {
  const srv = await protoServer();
  const eps = new Endpoints([srv.url], {}, 5_000, silentLogger);
  try {
    for (let i = 0; i < 3; i++) {
      const res = await eps.rpc().admit({});
      assert.equal(res.decision, Decision.ALLOW);
      for await (const _ of eps.rpc().watchConnections({})) { /* the fake ends at once */ }
    }
    const by = (path: string) => srv.seen.filter(([u]) => u.endsWith(path)).map(([, v]) => v);
    assert.deepEqual(by("/Admit"), ["1.1", "1.1", "1.1"]);
    assert.deepEqual(by("/WatchConnections"), ["2.0", "2.0", "2.0"]);
  } finally {
    eps.close();
    await srv.close();
  }
});

test("unary calls in flight at once take one kept-alive socket each, and reuse them", async () => {
  const srv = await protoServer();
  const eps = new Endpoints([srv.url], {}, 5_000, silentLogger);
  try {
    const wave = () => Promise.all(Array.from({ length: 16 }, () => eps.rpc().admit({})));
    await wave();
    const after1 = srv.sockets.size;
    assert.ok(after1 >= 1 && after1 <= 16, `sockets after the first wave: ${after1}`);
    await wave();
    assert.equal(srv.sockets.size, after1, "the second wave dialled no new socket");
  } finally {
    eps.close();
    await srv.close();
  }
});

test("httpPlan: which HTTP version each kind of call takes", () => {
  const cases: Array<[string, string, Parameters<typeof httpPlan>[1], ReturnType<typeof httpPlan>]> = [
    ["default, http://", "http://cd:8080", {}, { unary: "1.1", stream: "2" }],
    ["grpc-web, http://", "http://cd:8080", { protocol: "grpc-web" }, { unary: "1.1", stream: "2" }],
    ["default, https:// (HTTP/2 over TLS)", "https://cd", {}, { unary: "2", stream: "2" }],
    ["grpc needs HTTP/2", "http://cd:8080", { protocol: "grpc" }, { unary: "2", stream: "2" }],
    ["httpVersion 2 asked for", "http://cd:8080", { httpVersion: "2" }, { unary: "2", stream: "2" }],
    ["httpVersion 1.1 asked for", "http://cd:8080", { httpVersion: "1.1" }, { unary: "1.1", stream: "1.1" }],
  ];
  for (const [name, url, opts, want] of cases) assert.deepEqual(httpPlan(url, opts), want, name);
});
