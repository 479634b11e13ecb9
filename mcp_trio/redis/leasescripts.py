"""The Lua scripts that keep the sessions' records and leases in Redis (see :mod:`.sessions`): each
compares what Redis holds with what the worker saw or holds, and writes only if it is unchanged, in one
atomic step."""

from __future__ import annotations

PEEK = """
local record = redis.call('GET', KEYS[1])
if not record then return {0} end
local lease = redis.call('GET', KEYS[2]) or ''
local w = string.match(lease, '^%d+ %a+ ([%w_-]+) ')
local hb = ''
if w then hb = redis.call('GET', ARGV[1] .. ':worker:' .. w) or '' end
return {1, record, lease, hb}
"""
"""A session's record, its lease ('' for none) and the heartbeat ('' for none) of the worker the
lease names: 0 if there is no record."""
TAKE = """
if redis.call('GET', KEYS[1]) ~= ARGV[3] then return 0 end
if (redis.call('GET', KEYS[2]) or '') ~= ARGV[4] then return 0 end
if #KEYS > 2 and (redis.call('GET', KEYS[3]) or '') ~= ARGV[5] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[6])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[6])
return 1
"""
"""Take the lease (ARGV[1], the next epoch) with the record under that epoch (ARGV[2]) if the record,
the lease and the former owner's heartbeat (KEYS[3], if given) are still what :data:`PEEK` saw
(ARGV[3..5], '' for none): 1 taken, 0 changed meanwhile."""
PUT = """
local cur = redis.call('GET', KEYS[2])
if cur ~= ARGV[1] then
  if cur and tonumber(string.match(cur, '^(%d+) ') or '0') >= tonumber(ARGV[4]) then return 0 end
  if ARGV[5] ~= '1' then return 2 end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
return 1
"""
"""Write a session's record and lease (ARGV[1], of epoch ARGV[4]), unless the lease Redis holds is
another of this epoch or of a later one (0: the session was adopted elsewhere, this worker must let it
go).  A lease gone or of an earlier epoch (a Redis that lost it, or came back with older values) is
written back only if ARGV[5] is '1' (the worker's leases were sure all along); 2 otherwise."""
DROP = """
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[1], KEYS[2]) end
return 1
"""
"""A session that ended: its record and lease go, if its lease is still this worker's."""
RELEASE = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[4])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return 1
"""
"""Hand a session over: its last record written, its lease made free (ARGV[3], same epoch), if the
lease is still this worker's (ARGV[1])."""
REFRESH = """
local out = {}
for i = 1, #KEYS, 2 do
  local mine = ARGV[(i + 1) / 2 + 1]
  local cur = redis.call('GET', KEYS[i + 1])
  if cur == mine then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    redis.call('PEXPIRE', KEYS[i + 1], ARGV[1])
  elseif cur and tonumber(string.match(cur, '^(%d+) ') or '0') >= tonumber(string.match(mine, '^(%d+) ')) then
    table.insert(out, (i + 1) / 2)
  else
    table.insert(out, -(i + 1) / 2)
  end
end
return out
"""
"""Refresh the TTLs of records and leases still this worker's (ARGV[2..], one lease per session); the
positions of the sessions another worker holds under the same or a later epoch (lost), and, negated,
of those whose lease is gone or older (Redis lost it, or came back with older values: written again)."""
CONFIRM = """
local cur = redis.call('GET', KEYS[1])
local found = 1
if cur ~= ARGV[1] then
  if cur and tonumber(string.match(cur, '^(%d+) ') or '0') >= tonumber(ARGV[4]) then return 0 end
  found = 2
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return found
"""
"""Whether a session's lease is still this worker's (ARGV[1], of epoch ARGV[4]): 0 if another lease of
this epoch or a later one is there; 2 if it is gone or older (Redis lost it, or came back with older
values: the records' writer puts it back); 1 if it is there.  Unless 0, this worker's heartbeat is
renewed (ARGV[2]) in the same step, so that no adoption seen under the old one can complete."""
CHUNK = 256
"""Sessions per refresh script."""
