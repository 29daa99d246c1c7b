-- cap.lua: one capped caller's slots for one replica, atomically.
--
-- KEYS (one {hash tag} per caller, so Redis Cluster keeps them in one slot):
--   1 window    HASH  sec, n                what the caller used of the current second
--   2 inflight  HASH  t                     the caller's fleet total in flight
--                     <replica>             each replica's own count
--   3 heartbeat ZSET  replica -> expiry (ms) replicas holding slots
-- ARGV[1]: one JSON object, capredis.go's capArgs (the names are its json
-- tags): replica; want, how many of the caller's requests wait there;
-- in_flight, how many it holds now (absolute); max_in_flight and
-- requests_per_minute (2^40: no bound); ttl_ms, how long a silent replica
-- keeps its slots; clock_ms, 0 in production (windows follow Redis TIME);
-- poll_ms, the retry hint when only the in-flight bound blocks.
-- Reply: one JSON object, capredis.go's capReply: granted (0..want);
-- fleet, the caller's count in flight across the fleet after the call;
-- sec, the window's second; retry_ms, when asking again can succeed (0
-- when everything asked for was granted).

local a = cjson.decode(ARGV[1])
local kwin, kinf, khb = KEYS[1], KEYS[2], KEYS[3]
local rid = a.replica

local nowMs = a.clock_ms
if nowMs == 0 then
  local t = redis.call('TIME')
  nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local sec = math.floor(nowMs / 1000)

-- A replica whose heartbeat expired (it stopped calling: a crash) stops
-- counting: its slots come back.
for _, r in ipairs(redis.call('ZRANGEBYSCORE', khb, '-inf', nowMs)) do
  if r ~= rid then
    local n = tonumber(redis.call('HGET', kinf, r) or '0')
    if n ~= 0 then redis.call('HINCRBY', kinf, 't', -n) end
    redis.call('HDEL', kinf, r)
    redis.call('ZREM', khb, r)
  end
end

-- This replica's count is what it says it holds, so drift heals on every
-- call.
local old = tonumber(redis.call('HGET', kinf, rid) or '0')
local fleet = math.max(0, tonumber(redis.call('HGET', kinf, 't') or '0') - old + a.in_flight)

-- The grant: as capcount.go's capRoom.
local w = redis.call('HMGET', kwin, 'sec', 'n')
local used = 0
if tonumber(w[1]) == sec then used = tonumber(w[2]) or 0 end
local wroom = allowanceAt(sec, a.requests_per_minute) - used -- allowance.lua's, prepended
local granted = math.max(0, math.min(a.want, wroom, a.max_in_flight - fleet))

if granted > 0 then
  redis.call('HSET', kwin, 'sec', sec, 'n', used + granted)
  redis.call('PEXPIRE', kwin, 5000)
end
fleet = fleet + granted
local mine = a.in_flight + granted
if mine > 0 then
  redis.call('HSET', kinf, rid, mine)
  redis.call('ZADD', khb, nowMs + a.ttl_ms, rid)
else
  redis.call('HDEL', kinf, rid)
  redis.call('ZREM', khb, rid)
end
if fleet > 0 then redis.call('HSET', kinf, 't', fleet) else redis.call('HDEL', kinf, 't') end
local keep = math.max(60000, a.ttl_ms * 10)
redis.call('PEXPIRE', kinf, keep)
redis.call('PEXPIRE', khb, keep)

local retry = 0
if granted < a.want then
  if wroom <= granted then retry = 1000 - nowMs % 1000 else retry = a.poll_ms end
end
return cjson.encode({granted = granted, fleet = fleet, sec = sec, retry_ms = retry})
