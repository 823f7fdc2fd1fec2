"""The Lua scripts of the Redis store: the atomic append and the shard ops.

Pattern: server-side scripts loaded once per node and called by SHA; a
         ``NOSCRIPT`` reply means the script did not run, so the caller
         loads and resends (``wire.Wire.call_loaded``).
Role:    events layer, ``events/redis``; the appender and the outbox call them.

Laws: R2 (the append is one atomic step: seq and hash check, then the XADDs),
R19 (the same step writes the head record), R11 (a script touches one slot),
R20 (a resend is taken for one only when it carries the same append token).

Why scripts and not MULTI/WATCH: the check and the write must be one step on
the server, with no optimistic-retry round trips on the ledger's hot path.
"""

from __future__ import annotations

import hashlib
from typing import Final

# KEYS[1] the stream, KEYS[2] its head record, on a session's first append
# KEYS[3] its marker (R25, set when expected_seq is 0); ARGV expected_seq, prev_hash,
# the append's token, the head record after the batch (computed by the caller,
# which has the chain key), then (data, hash) per record. The batch's last
# entry keeps the token (field w). Returns {1, last_seq} when the batch is in
# the stream, {0, actual_seq} if not; a resend rewrites nothing.
# The check has a fast form: the head record (written only here, in the same
# step as the stream) names the stream's last seq and hash, and XLEN confirms
# the seq, so the common append reads neither the top entry nor its fields
# into Lua (about 40 % of the script's time, bench/ledger.py). Any doubt (no
# head record, another seq or hash, a deleted entry) takes the full check on
# the stream's top entry, which also recognizes a resend by its token (R20).
APPEND_LUA: Final = b"""
local key = KEYS[1]
local expected = tonumber(ARGV[1])
local n = (#ARGV - 4) / 2
local function write()
  local seq = expected
  for i = 5, #ARGV - 2, 2 do
    seq = seq + 1
    local s = string.format('%d', seq)
    redis.call('XADD', key, '0-' .. s, 'seq', s, 'data', ARGV[i], 'hash', ARGV[i + 1])
  end
  seq = seq + 1
  local s = string.format('%d', seq)
  redis.call('XADD', key, '0-' .. s, 'seq', s, 'data', ARGV[#ARGV - 1],
    'hash', ARGV[#ARGV], 'w', ARGV[3])
  redis.call('SET', KEYS[2], ARGV[4])
  -- R25: the first append marks the session as known here (KEYS[3]).
  if expected == 0 and KEYS[3] then redis.call('SET', KEYS[3], '1') end
  return {1, seq}
end
if n > 0 and expected > 0 then
  -- The fast check: the head record this script wrote with the last append
  -- says the stream ends at (expected, ARGV[2]), and the stream's length
  -- agrees (ids are 0-1..0-N). Anything else takes the full check below.
  local raw = redis.call('GET', KEYS[2])
  if raw then
    local seq, hash = string.match(raw, '^{"seq":(%d+),"hash":"([^"]*)"')
    if tonumber(seq) == expected and hash == ARGV[2]
        and redis.call('XLEN', key) == expected then
      return write()
    end
  end
end
local actual, last_hash, last_token = 0, '', ''
local top = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
if #top > 0 then
  actual = tonumber(string.match(top[1][1], '^0%-(%d+)$'))
  if actual == nil then
    return redis.error_reply('helmlog: foreign entry id ' .. top[1][1] .. ' in ' .. key)
  end
  local fields = top[1][2]
  for i = 1, #fields, 2 do
    if fields[i] == 'hash' then last_hash = fields[i + 1] end
    if fields[i] == 'w' then last_token = fields[i + 1] end
  end
end
if actual == expected then
  if n == 0 then return {1, expected} end
  if last_hash ~= ARGV[2] then return {0, actual} end
  return write()
end
if n > 0 and actual == expected + n and last_hash == ARGV[#ARGV]
    and last_token == ARGV[3] then
  return {1, actual}
end
return {0, actual}
"""
APPEND_SHA: Final = hashlib.sha1(APPEND_LUA).hexdigest()

# One shard's operations, in order. KEYS: facts stream, open hash, asks hash,
# facts-at hash. ARGV[1] facts maxlen, then 5 arguments per operation:
# code, session id, a, b, value. Codes (the rules of events/_index.py and the
# facts outbox, R4):
#   P publish a fact after the session's cursor (a = seq, value = data; the
#   append path publishes with plain XADD when no close rides along);
#   K advance the facts cursor over (b, a] when it already covers b;
#   O open mark (a = turn start seq); C close (a = end seq);
#   A pending ask (a = seq, value = entry); R resolve (a = resume seq);
#   X reindex (a = stream's last seq, b = open mark or 0, value = entry or '';
#   a = 0, an empty stream, also drops the session's cursor).
# A session whose P failed is "bad" for the rest of the call: its later
# facts, cursor moves and closes are skipped, so neither the cursor nor a
# close ever passes a fact that is not on the facts stream.
# Each write is a pcall, so one bad key fails its operation, not the shard's.
# Returns {failed, first error, facts published, sessions whose P failed}.
SHARD_LUA: Final = b"""
local function seq_of(entry)
  return tonumber(string.match(entry, '^(%d+):'))
end
local maxlen = ARGV[1]
local failed, first, published = 0, '', 0
local bad, refused = {}, {}
local function run(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    failed = failed + 1
    if first == '' then first = r.err end
    return false
  end
  return true
end
local function cursor(sid)
  return tonumber(redis.call('HGET', KEYS[4], sid) or '0')
end
for i = 2, #ARGV, 5 do
  local op, sid, a = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local b, value = ARGV[i + 3], ARGV[i + 4]
  local seq = tonumber(a)
  if op == 'P' then
    if not bad[sid] and seq > cursor(sid) then
      if run('XADD', KEYS[1], 'MAXLEN', '~', maxlen, '*',
             'session_id', sid, 'seq', a, 'data', value) then
        published = published + 1
      else
        bad[sid] = true
        refused[#refused + 1] = sid
      end
    end
  elseif op == 'K' then
    if not bad[sid] then
      local at = cursor(sid)
      if at >= tonumber(b) and at < seq then run('HSET', KEYS[4], sid, a) end
    end
  elseif op == 'O' then
    local v = redis.call('HGET', KEYS[2], sid)
    if not v or tonumber(v) < seq then run('HSET', KEYS[2], sid, a) end
  elseif op == 'C' then
    if not bad[sid] and redis.call('HEXISTS', KEYS[3], sid) == 0 then
      local v = redis.call('HGET', KEYS[2], sid)
      if v and tonumber(v) < seq then run('HDEL', KEYS[2], sid) end
    end
  elseif op == 'A' then
    local v = redis.call('HGET', KEYS[3], sid)
    if not v or seq_of(v) < seq then run('HSET', KEYS[3], sid, value) end
  elseif op == 'R' then
    local v = redis.call('HGET', KEYS[3], sid)
    if v and seq_of(v) < seq then run('HDEL', KEYS[3], sid) end
  elseif op == 'X' then
    local mark = tonumber(b)
    local v = redis.call('HGET', KEYS[2], sid)
    if mark > 0 then
      if not v or tonumber(v) < mark then run('HSET', KEYS[2], sid, b) end
    elseif v and tonumber(v) <= seq then
      run('HDEL', KEYS[2], sid)
    end
    local e = redis.call('HGET', KEYS[3], sid)
    if value ~= '' then
      if not e or seq_of(e) <= seq then run('HSET', KEYS[3], sid, value) end
    elseif e and seq_of(e) <= seq then
      run('HDEL', KEYS[3], sid)
    end
    if seq == 0 then run('HDEL', KEYS[4], sid) end
  end
end
return {failed, first, published, refused}
"""
SHARD_SHA: Final = hashlib.sha1(SHARD_LUA).hexdigest()
SCRIPTS: Final = (APPEND_LUA, SHARD_LUA)
