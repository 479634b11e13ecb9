"""The Lua scripts of :class:`~mcp_trio.redis.RedisEventStore`: a batch of writes, a stream's replay, a
session's positions.

A session's events are one hash, ``<prefix>:events:<session tag>``, with these fields:

- ``S``: the ids of the session's streams that hold events, least recently written first
  (space-separated decimal);
- ``B``: the bytes of event data the session holds;
- ``s<stream>``: ``<lo> <hi> <bytes> <last seq>``: the stream's events are the fields ``e<stream>:<n>``
  for ``lo <= n < hi`` (numbered in the order written, so the oldest is ``lo``), ``bytes`` their data,
  and the seq of the last one written;
- ``e<stream>:<n>``: an entry (:func:`~mcp_trio._protocol.cluster.seal_event_entry`): a header of fixed
  length, then the event's data.

Everything the scripts read is checked (numbers, the stream list, the ranges); a hash that does not
hold together (written by something else than these scripts) is deleted and started again, so that no
garbage can make a script loop or grow without bound.  The entries' signatures are checked by the
store, not here.
"""

from __future__ import annotations

__all__ = ["MAX_EVENTS_PER_STREAM", "MAX_STREAMS_PER_SESSION", "POSITIONS", "REPLAY", "WRITE"]

MAX_EVENTS_PER_STREAM = 65536
"""The largest ``max_events_per_stream`` a store takes (what a script accepts in a hash: workers whose bounds
differ share one without deleting each other's streams)."""
MAX_STREAMS_PER_SESSION = 4096
"""The largest ``max_streams_per_session`` a store takes."""

_COMMON = (
    f"""
local MAX_EVENTS_PER_STREAM, MAX_STREAMS = {MAX_EVENTS_PER_STREAM}, {MAX_STREAMS_PER_SESSION}
"""
    + """
local function int(text)
  if type(text) ~= 'string' or #text > 16 or not string.find(text, '^%d+$') then return nil end
  return tonumber(text)
end
local function fmt(n) return string.format('%d', n) end
local function parse_stream(text)
  if type(text) ~= 'string' then return nil end
  local lo, hi, bytes, last = string.match(text, '^(%d+) (%d+) (%d+) (%d+)$')
  lo, hi, bytes, last = int(lo), int(hi), int(bytes), int(last)
  if not (lo and hi and bytes and last) or hi <= lo or hi - lo > MAX_EVENTS_PER_STREAM then return nil end
  return {lo = lo, hi = hi, bytes = bytes, last = last}
end
"""
)

WRITE = (
    _COMMON
    + """
local ttl, per_stream, max_streams = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local max_bytes, header = tonumber(ARGV[4]), tonumber(ARGV[5])
local written, stale, resets = 0, 0, 0

local function trim_oldest(key, id, st)
  local field = 'e' .. id .. ':' .. fmt(st.lo)
  local size = redis.call('HSTRLEN', key, field) - header
  if size < 0 then size = 0 end
  redis.call('HDEL', key, field)
  st.lo = st.lo + 1
  st.bytes = math.max(0, st.bytes - size)
  return size
end

local function drop_stream(key, id, st)
  local fields = {'s' .. id}
  for n = st.lo, st.hi - 1 do
    fields[#fields + 1] = 'e' .. id .. ':' .. fmt(n)
    if #fields == 1000 then
      redis.call('HDEL', key, unpack(fields))
      fields = {}
    end
  end
  if #fields > 0 then redis.call('HDEL', key, unpack(fields)) end
  return st.bytes
end

-- Append one event; 'ok', 'stale' (the stream already has this seq or a later one) or 'corrupt'.
local function append(key, id, seq, value)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'hash' and kind ~= 'none' then return 'corrupt' end
  local got = redis.call('HMGET', key, 'S', 'B', 's' .. id)
  local order, total, streams = {}, 0, {}
  local position = nil
  if got[1] then
    local seen = {}
    for token in string.gmatch(got[1], '[^ ]+') do
      if not int(token) or seen[token] or #order >= MAX_STREAMS then return 'corrupt' end
      seen[token] = true
      order[#order + 1] = token
      if token == id then position = #order end
    end
    total = int(got[2])
    if not total then return 'corrupt' end
  elseif kind ~= 'none' then
    return 'corrupt'
  end
  local st = nil
  if got[3] then
    st = parse_stream(got[3])
    if not st or not position then return 'corrupt' end
    if seq <= st.last then return 'stale' end
    table.remove(order, position)
    order[#order + 1] = id
  else
    if position then return 'corrupt' end
    st = {lo = 0, hi = 0, bytes = 0, last = 0}
    order[#order + 1] = id
  end
  streams[id] = st
  while #order > max_streams do
    local victim = nil
    for k, other in ipairs(order) do
      if other ~= '0' and other ~= id then victim = k break end
    end
    if not victim then
      for k, other in ipairs(order) do
        if other ~= id then victim = k break end
      end
    end
    local vid = order[victim]
    local vst = parse_stream(redis.call('HGET', key, 's' .. vid))
    if not vst then return 'corrupt' end
    total = total - drop_stream(key, vid, vst)
    table.remove(order, victim)
  end
  local size = #value - header
  redis.call('HSET', key, 'e' .. id .. ':' .. fmt(st.hi), value)
  st.hi = st.hi + 1
  st.bytes = st.bytes + size
  st.last = seq
  total = total + size
  while st.hi - st.lo > per_stream do total = total - trim_oldest(key, id, st) end
  while total > max_bytes and #order > 0 do
    local first = order[1]
    local fst = streams[first]
    if not fst then
      fst = parse_stream(redis.call('HGET', key, 's' .. first))
      if not fst then return 'corrupt' end
      streams[first] = fst
    end
    total = total - trim_oldest(key, first, fst)
    if fst.lo >= fst.hi then
      redis.call('HDEL', key, 's' .. first)
      streams[first] = nil
      table.remove(order, 1)
    end
  end
  if #order == 0 then
    redis.call('DEL', key)
    return 'ok'
  end
  local fields = {'S', table.concat(order, ' '), 'B', fmt(math.max(0, total))}
  for sid, sst in pairs(streams) do
    fields[#fields + 1] = 's' .. sid
    fields[#fields + 1] = fmt(sst.lo) .. ' ' .. fmt(sst.hi) .. ' ' .. fmt(sst.bytes) .. ' ' .. fmt(sst.last)
  end
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIRE', key, ttl)
  return 'ok'
end

local fenced = 0
local i = 6
while i + 6 <= #ARGV do
  local key = KEYS[tonumber(ARGV[i])]
  local kind, id, seq, value = ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4]
  local lease = nil
  if ARGV[i + 5] ~= '' then lease = redis.call('GET', KEYS[tonumber(ARGV[i + 5])]) end
  local held = ARGV[i + 6]
  i = i + 7
  if lease and lease ~= held then
    fenced = fenced + 1
  elseif kind == 'd' then
    redis.call('DEL', key)
  elseif kind == 't' then
    redis.call('PEXPIRE', key, ttl)
  else
    local outcome = append(key, id, seq, value)
    if outcome == 'corrupt' then
      redis.call('DEL', key)
      resets = resets + 1
      outcome = append(key, id, seq, value)
    end
    if outcome == 'ok' then written = written + 1 else stale = stale + 1 end
  end
end
return {written, stale, resets, fenced}
"""
)
"""Apply a batch of operations, in order: ARGV[1] the TTL (ms), ARGV[2..5] the bounds (events per
stream, streams per session, bytes per session) and the entry header's length, then seven arguments
per operation: the index of its key in KEYS, ``e`` (append an event: stream id, seq, entry), ``d``
(delete the session's events) or ``t`` (refresh their TTL), the last two with three empty arguments;
then the index in KEYS of the session's lease and the lease this worker holds it under ('' and '' for
none): an operation of a session whose lease is there and another is fenced off (skipped: a worker
that lost the session writes nothing of it).  Each append enforces the session's bounds as
:class:`~mcp_trio.server.InMemoryEventStore` does, dropping the oldest first, and refreshes the TTL.
Returns ``{written, stale, resets, fenced}``: an event whose stream already holds that seq or a later
one is stale (a batch written again after its answer was lost writes nothing twice)."""

_FIRST_HASH = """
local chosen = nil
for k, key in ipairs(KEYS) do
  if redis.call('TYPE', key)['ok'] == 'hash' then chosen = k break end
end
if not chosen then return {0} end
local key = KEYS[chosen]
"""

REPLAY = (
    _COMMON
    + _FIRST_HASH
    + """
local id, per_stream, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {chosen}
local st = parse_stream(redis.call('HGET', key, 's' .. id))
if st then
  for n = math.max(st.lo, st.hi - per_stream), st.hi - 1 do
    local field = 'e' .. id .. ':' .. fmt(n)
    if redis.call('HSTRLEN', key, field) <= limit then
      out[#out + 1] = redis.call('HGET', key, field) or ''
    end
  end
end
return out
"""
)
"""The entries of one stream (ARGV[1]) of a session, oldest first, from the first of KEYS (the session's
key under each key of the ring) that holds a hash: ``{index of that key, entry, ...}`` (``{0}`` for
none).  Entries longer than ARGV[3] bytes are left out."""

POSITIONS = (
    _COMMON
    + _FIRST_HASH
    + """
local per_stream, max_streams, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {chosen}
local order = redis.call('HGET', key, 'S')
if type(order) == 'string' then
  local count = 0
  for id in string.gmatch(order, '[^ ]+') do
    count = count + 1
    if count > MAX_STREAMS or not int(id) then break end
    local st = parse_stream(redis.call('HGET', key, 's' .. id))
    if st then
      local field = 'e' .. id .. ':' .. fmt(st.hi - 1)
      if redis.call('HSTRLEN', key, field) <= limit then
        out[#out + 1] = id
        out[#out + 1] = redis.call('HGET', key, field) or ''
      end
    end
  end
end
return out
"""
)
"""The last entry written of each stream of a session: ``{index of the key, stream id, entry, ...}``
(``{0}`` for none)."""
