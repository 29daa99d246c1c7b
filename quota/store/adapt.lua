-- adapt.lua: one pool's adaptive in-flight bound, for one replica,
-- atomically (adaptstore.go says why the controller itself runs in Go).
--
-- KEYS[1] (under the pool's {hash tag}, with its take.lua keys):
--   adapt HASH  completed, work, latency_us, failures, throttled, busy_us
--                 the fleet's counts since the last step
--               saturated    1 when a replica found the bound binding
--               last_ms      when the bound was last stepped
--               holder, until_ms  the replica that steps it, and until
--                 when its lease runs (renewed by its calls)
--               view         the controller's state, last decision and
--                 last judged measurement (adaptView's JSON)
--               step_to, step_sample  the replica:seq of the add the
--                 last step was handed to, and that step's reply fields
--                 (JSON), handed again to a retry of that add
-- KEYS[2] (same tag): STRING, the caller's last add's seq, so that a
--   retried add (its reply lost) counts once.
-- ARGV[1]: one JSON object, adaptredis.go's adaptArgs (the names are its
-- json tags): op, "add" or "commit"; replica; for add, seq (a decimal
-- string, growing with each new add of the replica's, the same on a retry;
-- "0": none), the replica's counts since its last add (decimal strings),
-- saturated, interval_ms (the least time between steps) and lease_ms; for
-- commit, view; clock_ms, 0 in production (the lease and the steps follow
-- Redis TIME).
-- Reply: one JSON object, adaptredis.go's adaptReply. add: view ("" before
-- the first step); step, true when the caller holds the lease and
-- interval_ms has passed since the last step, and then the counts since
-- that step, saturated and elapsed_ms (0 at the first step), which are
-- reset. An add whose seq the caller sent already adds nothing: if it was
-- handed a step, the same step is handed again; else it answers as a new
-- add of no counts. commit: committed, whether the caller still held the
-- lease and the view was stored.

local a = cjson.decode(ARGV[1])
local k = KEYS[1]
local nowMs = a.clock_ms
if nowMs == 0 then
  local t = redis.call('TIME')
  nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local keep = math.max(60000, a.lease_ms * 10)
local h = redis.call('HMGET', k, 'holder', 'until_ms')
local holder, untilMs = h[1], tonumber(h[2] or '0') or 0
local holds = holder == a.replica and untilMs > nowMs

if a.op == 'commit' then
  if holds then
    redis.call('HSET', k, 'view', a.view)
    redis.call('PEXPIRE', k, keep)
  end
  return cjson.encode({committed = holds})
end

-- A seq the caller sent already is a retry whose reply was lost: its
-- counts are in.
local seqKey = KEYS[2]
local dup = false
if a.seq ~= '0' then
  local last = redis.call('GET', seqKey)
  dup = last ~= false and tonumber(last) >= tonumber(a.seq)
end
local fields = {'completed', 'work', 'latency_us', 'failures', 'throttled', 'busy_us'}
if dup then
  redis.call('PEXPIRE', seqKey, keep)
else
  for _, f in ipairs(fields) do
    if a[f] ~= '0' then redis.call('HINCRBY', k, f, a[f]) end
  end
  if a.saturated then redis.call('HSET', k, 'saturated', 1) end
  if a.seq ~= '0' then redis.call('SET', seqKey, a.seq, 'PX', keep) end
end

-- The lease: the holder renews it; anyone takes it once it ran out (its
-- holder stopped calling: a crash).
if holds or not holder or untilMs <= nowMs then
  holds = true
  redis.call('HSET', k, 'holder', a.replica, 'until_ms', nowMs + a.lease_ms)
end

local reply = {step = false, view = redis.call('HGET', k, 'view') or ''}
local stepTo = a.replica .. ':' .. a.seq
if holds and dup and redis.call('HGET', k, 'step_to') == stepTo then
  -- The step this add was handed, whose reply was lost: the same again.
  local sample = cjson.decode(redis.call('HGET', k, 'step_sample'))
  for f, v in pairs(sample) do reply[f] = v end
  reply.step = true
elseif holds then
  local last = tonumber(redis.call('HGET', k, 'last_ms') or '0') or 0
  if last == 0 or nowMs - last >= a.interval_ms then
    local v = redis.call('HMGET', k, 'completed', 'work', 'latency_us', 'failures', 'throttled', 'busy_us', 'saturated')
    local sample = {saturated = v[7] == '1', elapsed_ms = '0'}
    for i, f in ipairs(fields) do sample[f] = v[i] or '0' end
    if last > 0 then sample.elapsed_ms = string.format('%d', nowMs - last) end
    for f, x in pairs(sample) do reply[f] = x end
    reply.step = true
    redis.call('HDEL', k, 'completed', 'work', 'latency_us', 'failures', 'throttled', 'busy_us', 'saturated')
    redis.call('HSET', k, 'last_ms', nowMs, 'step_to', stepTo, 'step_sample', cjson.encode(sample))
  end
end
redis.call('PEXPIRE', k, keep)
return cjson.encode(reply)
