// The gateway's WebSocket in the `imesh.json` subprotocol: one ClientFrame / ServerFrame per
// text message, in the proto3 JSON mapping (camelCase fields, 64-bit ids as strings).

export interface Media {
  objectKey?: string;
  url?: string;
  sizeBytes?: string;
  mimeType?: string;
  width?: number;
  height?: number;
}

export interface Content {
  text?: { text: string };
  image?: Media;
  notice?: { code: string; text: string };
}

export interface Message {
  conversationId: string;
  seq: string;
  senderId?: string;
  content?: Content;
  receipt?: boolean;
  recalledBy?: string;
}

export interface SyncEvent {
  message?: Message;
  read?: { conversationId: string; userId: string; readSeq: string };
  receipt?: { conversationId: string; seq: string; read?: number; total?: number };
  typing?: { conversationId: string; userId: string };
  recalled?: { conversationId: string; seq: string };
}

export interface InboxEntry {
  syncSeq?: string;
  event?: SyncEvent;
}

export type ServerFrame = { requestId?: string } & Record<string, any>;

/** An error frame's status, as the gateway sent it. */
export class RequestError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

export class Connection {
  private next = 0;
  private waiting = new Map<string, (frame: ServerFrame) => void>();
  /** Live inbox entries, in order. */
  onPush: (entries: InboxEntry[]) => void = () => {};
  onClose: (reason: string) => void = () => {};

  private constructor(private readonly ws: WebSocket) {
    ws.onmessage = (event) => this.receive(JSON.parse(String(event.data)));
    ws.onclose = (event) => this.onClose(event.reason || "the connection closed");
  }

  /** Connects to `url` and signs in; answers the connection and the user's id. */
  static async open(url: string, token: string, deviceId: string) {
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
  call(body: Record<string, unknown>): Promise<ServerFrame> {
    const requestId = String(++this.next);
    this.ws.send(JSON.stringify({ requestId, ...body }));
    return new Promise((resolve, reject) => {
      this.waiting.set(requestId, (frame) =>
        frame.error ? reject(new RequestError(frame.error.code ?? 2, frame.error.message)) : resolve(frame),
      );
    });
  }

  /** Tells the gateway the device holds every entry up to `syncSeq`. */
  ack(syncSeq: string) {
    this.ws.send(JSON.stringify({ ack: { syncSeq } }));
  }

  private receive(frame: ServerFrame) {
    const answer = frame.requestId ? this.waiting.get(frame.requestId) : undefined;
    if (answer) {
      this.waiting.delete(frame.requestId!);
      answer(frame);
    } else if (frame.push) {
      this.onPush(frame.push.entries ?? []);
    }
  }
}
