"""The Lua scripts of a worker's inbox (:class:`~mcp_trio.redis.workers.WorkerLink`): whether a worker
has a session (:data:`KNOWN`), adding a forwarded message to its inbox (:data:`FORWARD`), and deleting
what its reader read (:data:`TAKE`).

A worker's inbox is the stream ``<prefix>:inbox:<worker>`` and the count of the bytes of its entries,
``<prefix>:inbox-bytes:<worker>``.  Neither is signed (the entries are, and their reader checks them),
so what the scripts read there is trusted no further than it can be checked: see :data:`_INBOX_STATE`.
"""

from __future__ import annotations

__all__ = ["FORWARD", "KNOWN", "TAKE"]

_INBOX_STATE = """
local function inbox_state(stream, counter, limit, ttl)
  if redis.call('TYPE', stream)['ok'] ~= 'stream' or redis.call('XLEN', stream) == 0 then
    redis.call('DEL', stream, counter)
    return 0, 0
  end
  local entries = redis.call('XLEN', stream)
  local kind = redis.call('TYPE', counter)['ok']
  if kind == 'none' then return entries, 0 end
  local raw = ''
  if kind == 'string' then raw = redis.call('GET', counter) end
  local held = 0
  if #raw <= 15 and string.match(raw, '^%d+$') then held = tonumber(raw) end
  held = math.min(held, entries * limit)
  if raw ~= tostring(held) then
    redis.call('DEL', counter)
    redis.call('SET', counter, held, 'PX', ttl)
  end
  return entries, held
end
"""
"""The Lua function the inbox's scripts share: the entries of an inbox (``stream``) and the bytes they
hold (``counter``), trusted no further than the stream can hold (``limit``, the largest body, per entry).
Neither key is signed, so a writer without the key ring could make an inbox look full for good; here a
value that is not an inbox is deleted (a stream of another type, a counter that is not a count), an
empty inbox is deleted with its counter (which also forgets a last entry id set far ahead), and a
counter above ``limit`` per entry is lowered to that.  Entries a writer added are counted (until the
reader drops them, at once), never their bytes."""
FORWARD = (
    _INBOX_STATE
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local pairs = tonumber(ARGV[5])
local found = false
for i = 0, pairs - 1 do
  local owner = redis.call('HGET', KEYS[2], ARGV[6 + 2 * i])
  if owner and owner == ARGV[7 + 2 * i] then found = true end
end
if not found then return -1 end
local size = tonumber(ARGV[4])
local entries, held = inbox_state(KEYS[3], KEYS[4], tonumber(ARGV[6 + 2 * pairs]), ARGV[3])
if entries >= tonumber(ARGV[1]) then return -2 end
if held + size > tonumber(ARGV[2]) then return -2 end
local f = 7 + 2 * pairs
redis.call('XADD', KEYS[3], '*', 'v', ARGV[f], 'kid', ARGV[f + 1], 'sig', ARGV[f + 2], 'ts', ARGV[f + 3],
  'nonce', ARGV[f + 4], 'session', ARGV[f + 5], 'principal', ARGV[f + 6], 'body', ARGV[f + 7])
redis.call('INCRBY', KEYS[4], size)
redis.call('PEXPIRE', KEYS[3], ARGV[3])
redis.call('PEXPIRE', KEYS[4], ARGV[3])
return 1
"""
)
"""Add an entry to a worker's inbox, atomically, only if the worker is alive (its heartbeat key), has
the session (its tag, under one of the forwarder's keys, is a field of the worker's session hash) with
the same principal (the field's value), and the inbox holds fewer than ARGV[1] entries and ARGV[2]
bytes with this one (as :data:`_INBOX_STATE` counts them, with the largest body ARGV[6 + 2 * pairs]):
1 sent, 0 gone, -1 unknown session, -2 full.  The inbox and its byte counter expire ARGV[3] ms after
the last entry added."""
KNOWN = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for i = 1, #ARGV, 2 do
  local owner = redis.call('HGET', KEYS[2], ARGV[i])
  if owner and owner == ARGV[i + 1] then return 1 end
end
return -1
"""
"""The first check of :data:`FORWARD`, without the body: 1 known, 0 gone, -1 unknown.  (So that a
flood of bodies for made-up sessions does not even travel to Redis.)"""
TAKE = (
    _INBOX_STATE
    + """
if #ARGV > 3 and redis.call('TYPE', KEYS[1])['ok'] == 'stream' then
  redis.call('XDEL', KEYS[1], unpack(ARGV, 4))
end
local entries, held = inbox_state(KEYS[1], KEYS[2], tonumber(ARGV[2]), ARGV[3])
if entries == 0 then return 0 end
local size = tonumber(ARGV[1])
if size > 0 and held > 0 then redis.call('SET', KEYS[2], math.max(0, held - size), 'KEEPTTL') end
return 1
"""
)
"""Delete the inbox entries read (ids ARGV[4..]) and their bytes (ARGV[1]) from the counter (as
:data:`_INBOX_STATE` counts them, with the largest body ARGV[2] and the inbox's TTL ARGV[3] ms); an
empty inbox is deleted with its counter (which also forgets bytes of entries that expired unread): 0
then, else 1."""
