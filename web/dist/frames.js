// The gateway's WebSocket in the `imesh.json` subprotocol: one ClientFrame / ServerFrame per
// text message, in the proto3 JSON mapping (camelCase fields, 64-bit ids as strings).
/** An error frame's status, as the gateway sent it. */
export class RequestError extends Error {
    code;
    constructor(code, message) {
        super(message);
        this.code = code;
    }
}
export class Connection {
    ws;
    next = 0;
    waiting = new Map();
    /** Live inbox entries, in order. */
    onPush = () => { };
    onClose = () => { };
    constructor(ws) {
        this.ws = ws;
        ws.onmessage = (event) => this.receive(JSON.parse(String(event.data)));
        ws.onclose = (event) => this.onClose(event.reason || "the connection closed");
    }
    /** Connects to `url` and signs in; answers the connection and the user's id. */
    static async open(url, token, deviceId) {
        const ws = new WebSocket(url, "imesh.json");
        await new Promise((resolve, reject) => {
            ws.onopen = resolve;
            ws.onerror = () => reject(new Error(`cannot reach ${url}`));
        });
        const connection = new Connection(ws);
        const ok = await connection.call({ auth: { token, deviceId, platform: "web" } });
        return { connection, userId: String(ok.authOk.userId) };
    }
    /** Sends one request; answers its reply, or throws the error frame's status. */
    call(body) {
        const requestId = String(++this.next);
        this.ws.send(JSON.stringify({ requestId, ...body }));
        return new Promise((resolve, reject) => {
            this.waiting.set(requestId, (frame) => frame.error ? reject(new RequestError(frame.error.code ?? 2, frame.error.message)) : resolve(frame));
        });
    }
    /** Tells the gateway the device holds every entry up to `syncSeq`. */
    ack(syncSeq) {
        this.ws.send(JSON.stringify({ ack: { syncSeq } }));
    }
    receive(frame) {
        const answer = frame.requestId ? this.waiting.get(frame.requestId) : undefined;
        if (answer) {
            this.waiting.delete(frame.requestId);
            answer(frame);
        }
        else if (frame.push) {
            this.onPush(frame.push.entries ?? []);
        }
    }
}
