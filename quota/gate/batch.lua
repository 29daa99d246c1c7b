-- batch.lua: batches' reservations for a fleet, atomically (batchredis.go).
-- Kept apart from budget.lua, whose hashes it shares: a batch's
-- reservation is a field b:<batch id> of each budget period's hash, which
-- budget.lua's reaper (it reaps r:<replica>:<n> fields) never touches, so
-- it outlives the request and the replica that made it.
--
-- KEYS (all under the hash tag {prefix:budget}):
--   1       STRING  the batch's record (JSON, batchRecord)
--   2       HASH    enqueued: where (JSON, BatchEnqueued without tokens)
--                   -> tokens
--   3..n+2  HASH    the budget periods of the batch's reservation
-- ARGV[1]: one JSON object, batchredis.go's batchArgs: op (bind, end);
-- record, the record's JSON (bind); ttl_s, the record's TTL; pending, the
-- field of the request's reservation (r:<replica>:<n>) that bind moves;
-- field, the batch's own (b:<batch id>); cost (end); where and tokens,
-- the enqueued count; expire_s, one per budget key.
-- Reply: 1 when the call changed something, 0 when the batch was bound
-- (bind) or ended (end) already: both are idempotent.

local a = cjson.decode(ARGV[1])
local krec, kq = KEYS[1], KEYS[2]
local function str(n) return string.format('%.0f', n) end

if a.op == 'bind' then
  if redis.call('EXISTS', krec) == 1 then return 0 end
  for i = 3, #KEYS do
    local held = redis.call('HGET', KEYS[i], a.pending)
    if held then
      redis.call('HDEL', KEYS[i], a.pending)
      redis.call('HSET', KEYS[i], a.field, held)
    else
      -- Reaped (budget.lua): charged in full and kept as p:<id>, what it
      -- held; the batch's end refunds what it held beyond its cost, once
      -- (q + field).
      local pf = 'p:' .. string.sub(a.pending, 3)
      local charged = redis.call('HGET', KEYS[i], pf)
      if charged then
        redis.call('HDEL', KEYS[i], pf)
        redis.call('HSET', KEYS[i], 'q' .. a.field, charged)
      end
    end
    redis.call('EXPIRE', KEYS[i], a.expire_s[i - 2])
  end
  redis.call('SET', krec, a.record, 'EX', a.ttl_s)
  redis.call('HINCRBY', kq, a.where, str(a.tokens))
  redis.call('EXPIRE', kq, a.ttl_s)
  return 1
end

-- end: once, while the record is there.
if redis.call('DEL', krec) == 0 then return 0 end
for i = 3, #KEYS do
  local k = KEYS[i]
  local held = redis.call('HGET', k, a.field)
  if held then
    redis.call('HDEL', k, a.field)
    redis.call('HINCRBY', k, 'reserved', str(-tonumber(held)))
    redis.call('HINCRBY', k, 'spent', str(a.cost))
    redis.call('EXPIRE', k, a.expire_s[i - 2])
  else
    local charged = redis.call('HGET', k, 'q' .. a.field)
    if charged then
      redis.call('HDEL', k, 'q' .. a.field)
      local spent = tonumber(redis.call('HGET', k, 'spent') or '0')
      local d = math.max(a.cost - tonumber(charged), -spent)
      if d ~= 0 then redis.call('HINCRBY', k, 'spent', str(d)) end
      redis.call('EXPIRE', k, a.expire_s[i - 2])
    end
  end
end
if redis.call('HINCRBY', kq, a.where, str(-a.tokens)) <= 0 then redis.call('HDEL', kq, a.where) end
return 1
