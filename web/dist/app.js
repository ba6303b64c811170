// The demo client: sign in with a token, a conversation list with unread counts, one
// conversation's live messages with read state ("read", "2 unread"), typing, and images
// uploaded by ticket straight to the file store.
import { Connection, RequestError } from "./frames.js";
const TYPING_SHOWN_MS = 4000;
const TYPING_EVERY_MS = 3000;
const $ = (id) => document.getElementById(id);
const conversations = new Map();
/** Users' display names (nickname, else username), asked of relation-svc once each. */
const names = new Map();
const asked = new Set();
const receipts = new Map();
let connection;
let me = "";
let open = null;
let typingShown;
let typingSent = 0;
function show(text) {
    $("status").textContent = text;
}
function fail(error) {
    show(error instanceof RequestError ? `error ${error.code}: ${error.message}` : String(error));
}
function conversation(id) {
    let found = conversations.get(id);
    if (!found) {
        found = { id, latestSeq: 0, readSeq: 0, peerReadSeq: 0, messages: new Map() };
        conversations.set(id, found);
    }
    return found;
}
/** A user's name once known (asked for on first sight), their id until then. */
function who(id) {
    if (!asked.has(id)) {
        asked.add(id);
        connection
            .call({ relation: { getUsers: { userIds: [id] } } })
            .then((reply) => {
            for (const u of reply.relation.getUsers.users ?? [])
                names.set(String(u.userId), u.nickname || u.username);
            render();
        })
            .catch(fail);
    }
    return names.get(id) ?? `user ${id}`;
}
function render() {
    $("me").textContent = `signed in as ${who(me)}`;
    renderList();
    renderMessages();
}
/** Who the conversation is with, as its id says (`d:<a>:<b>`, `g:<group>`, `s:<user>`). */
function title(id) {
    const [kind, a, b] = id.split(":");
    if (kind === "d")
        return who(a === me ? b : a);
    if (kind === "g")
        return `group ${a}`;
    return "notices";
}
function unread(c) {
    return Math.max(0, c.latestSeq - c.readSeq);
}
function renderList() {
    const list = $("conversations");
    list.replaceChildren();
    const sorted = [...conversations.values()].sort((x, y) => y.latestSeq - x.latestSeq);
    for (const c of sorted) {
        const item = document.createElement("li");
        item.dataset.conversation = c.id;
        item.className = c.id === open ? "open" : "";
        const name = document.createElement("span");
        name.textContent = title(c.id);
        const badge = document.createElement("span");
        badge.className = "unread";
        badge.textContent = unread(c) > 0 ? String(unread(c)) : "";
        item.append(name, badge);
        item.onclick = () => openConversation(c.id).catch(fail);
        list.append(item);
    }
}
/** An own message's read state: a direct peer's watermark, or a receipt message's count. */
function readState(c, m) {
    const seq = Number(m.seq);
    if (c.id.startsWith("d:"))
        return seq <= c.peerReadSeq ? "read" : "unread";
    const count = receipts.get(`${c.id}/${seq}`);
    if (!m.receipt || !count)
        return "";
    const left = count.total - count.read;
    return left > 0 ? `${left} unread` : "all read";
}
function renderMessages() {
    const list = $("messages");
    list.replaceChildren();
    if (!open)
        return;
    const c = conversation(open);
    $("title").textContent = title(open);
    for (const seq of [...c.messages.keys()].sort((x, y) => x - y)) {
        const m = c.messages.get(seq);
        const item = document.createElement("li");
        item.dataset.seq = String(seq);
        const mine = m.senderId === me;
        item.className = mine ? "mine" : "theirs";
        const sender = document.createElement("span");
        sender.className = "sender";
        sender.textContent = mine ? "me" : m.senderId ? who(m.senderId) : "system";
        item.append(sender, body(c, m));
        if (mine) {
            const status = document.createElement("span");
            status.className = "status";
            status.textContent = readState(c, m);
            item.append(status);
        }
        list.append(item);
    }
    list.scrollTop = list.scrollHeight;
}
function body(c, m) {
    const image = m.content?.image;
    if (!image) {
        const text = document.createElement("span");
        text.className = "text";
        const content = m.content;
        const recalled = !content && m.recalledBy && m.recalledBy !== "0";
        text.textContent = recalled ? "(recalled)" : (content?.text?.text ?? content?.notice?.text ?? "");
        return text;
    }
    const img = document.createElement("img");
    img.alt = "image";
    if (image.url) {
        img.src = image.url;
    }
    else {
        connection
            .call({ getDownload: { conversationId: c.id, seq: m.seq } })
            .then((reply) => (img.src = reply.download.url))
            .catch(fail);
    }
    return img;
}
function remember(m) {
    const c = conversation(m.conversationId);
    const seq = Number(m.seq);
    c.messages.set(seq, m);
    c.latestSeq = Math.max(c.latestSeq, seq);
    if (m.senderId === me)
        c.readSeq = Math.max(c.readSeq, seq);
}
async function markRead(c) {
    if (unread(c) === 0)
        return;
    c.readSeq = c.latestSeq;
    await connection.call({ markRead: { marks: [{ conversationId: c.id, readSeq: String(c.latestSeq) }] } });
}
async function countReceipts(c, seqs) {
    if (!c.id.startsWith("g:") || seqs.length === 0)
        return;
    const reply = await connection.call({ receiptCounts: { conversationId: c.id, seqs } });
    for (const count of reply.receiptCounts.counts ?? []) {
        receipts.set(`${c.id}/${Number(count.seq)}`, { read: count.read ?? 0, total: count.total ?? 0 });
    }
}
async function openConversation(id) {
    open = id;
    const c = conversation(id);
    $("conversation").hidden = false;
    const reply = await connection.call({ history: { conversationId: id, limit: 50 } });
    const page = reply.history.messages ?? [];
    page.forEach(remember);
    const mine = page.filter((m) => m.senderId === me && m.receipt).map((m) => m.seq);
    await countReceipts(c, mine);
    await markRead(c);
    render();
}
function apply(event) {
    if (event.message) {
        const m = event.message;
        remember(m);
        const c = conversation(m.conversationId);
        if (m.conversationId === open && m.senderId !== me)
            markRead(c).catch(fail);
        // Counted once sync-svc holds it, which its push says: ask for the first count now.
        if (m.senderId === me && m.receipt)
            countReceipts(c, [m.seq]).then(renderMessages).catch(fail);
    }
    else if (event.read) {
        const c = conversation(event.read.conversationId);
        const seq = Number(event.read.readSeq);
        if (event.read.userId === me)
            c.readSeq = Math.max(c.readSeq, seq);
        else
            c.peerReadSeq = Math.max(c.peerReadSeq, seq);
    }
    else if (event.receipt) {
        const r = event.receipt;
        receipts.set(`${r.conversationId}/${Number(r.seq)}`, { read: r.read ?? 0, total: r.total ?? 0 });
    }
    else if (event.typing && event.typing.userId !== me && event.typing.conversationId === open) {
        $("typing").textContent = `${who(event.typing.userId)} is typing…`;
        clearTimeout(typingShown);
        typingShown = setTimeout(() => ($("typing").textContent = ""), TYPING_SHOWN_MS);
    }
}
function receive(entries) {
    let acked = 0;
    for (const entry of entries) {
        if (entry.event)
            apply(entry.event);
        acked = Math.max(acked, Number(entry.syncSeq ?? 0));
    }
    if (acked > 0)
        connection.ack(String(acked));
    render();
}
/** Where a new message to the open conversation goes, as the send request names it. */
function target() {
    const [kind, a, b] = open.split(":");
    if (kind === "g")
        return { groupId: a, receipt: true };
    return { userId: a === me ? b : a };
}
async function send(content) {
    const clientMsgId = crypto.randomUUID();
    await connection.call({ send: { clientMsgId, ...target(), content } });
}
function imageSize(file) {
    return new Promise((resolve, reject) => {
        const img = new Image();
        img.onload = () => resolve({ width: img.naturalWidth, height: img.naturalHeight });
        img.onerror = () => reject(new Error("not an image this browser can read"));
        img.src = URL.createObjectURL(file);
    });
}
/** Asks for a ticket, PUTs the bytes where it says, then sends the image message. */
async function sendImage(file) {
    const reply = await connection.call({
        createUpload: { kind: "UPLOAD_KIND_IMAGE", mimeType: file.type, sizeBytes: String(file.size) },
    });
    const target = reply.upload.object;
    const stored = await fetch(target.url, { method: "PUT", headers: target.headers, body: file });
    if (!stored.ok)
        throw new Error(`upload refused: ${stored.status} ${await stored.text()}`);
    const { width, height } = await imageSize(file);
    const image = { objectKey: target.objectKey, sizeBytes: String(file.size), mimeType: file.type, width, height };
    await send({ image });
}
async function start(token) {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    let deviceId = localStorage.getItem("imesh-device");
    if (!deviceId) {
        deviceId = `web-${crypto.randomUUID()}`;
        localStorage.setItem("imesh-device", deviceId);
    }
    const opened = await Connection.open(`${scheme}://${location.host}/ws`, token, deviceId);
    connection = opened.connection;
    me = opened.userId;
    connection.onPush = receive;
    connection.onClose = (reason) => show(`disconnected: ${reason}`);
    $("login").hidden = true;
    $("app").hidden = false;
    const reply = await connection.call({ conversations: { limit: 100 } });
    for (const c of reply.conversations.conversations ?? []) {
        const known = conversation(c.conversationId);
        known.latestSeq = Number(c.latestSeq ?? 0);
        known.readSeq = Number(c.readSeq ?? 0);
        known.peerReadSeq = Number(c.peerReadSeq ?? 0);
    }
    render();
}
$("login-form").onsubmit = (event) => {
    event.preventDefault();
    start($("token").value.trim()).catch(fail);
};
$("new-chat").onsubmit = (event) => {
    event.preventDefault();
    const peer = $("peer").value.trim();
    // Ids are 64-bit: compared as BigInt, never as a Number, which would round them.
    const [low, high] = BigInt(me) < BigInt(peer) ? [me, peer] : [peer, me];
    openConversation(`d:${low}:${high}`).catch(fail);
};
$("composer").onsubmit = (event) => {
    event.preventDefault();
    const input = $("text");
    const text = input.value.trim();
    if (!text || !open)
        return;
    input.value = "";
    send({ text: { text } }).catch(fail);
};
$("text").oninput = () => {
    if (!open || Date.now() - typingSent < TYPING_EVERY_MS)
        return;
    typingSent = Date.now();
    connection.call({ typing: { conversationId: open } }).catch(fail);
};
$("image").onchange = (event) => {
    const input = event.target;
    const file = input.files?.[0];
    input.value = "";
    if (file && open)
        sendImage(file).catch(fail);
};
// A token in the address's fragment (`/#token=…`) signs in at once; it never reaches a server log.
const fromFragment = new URLSearchParams(location.hash.slice(1)).get("token");
if (fromFragment)
    start(fromFragment).catch(fail);
