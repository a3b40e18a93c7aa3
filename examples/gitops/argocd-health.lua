-- Argo CD health check for shardwise.io/InferenceDeployment (argocd-cm key
-- resource.customizations.health.shardwise.io_InferenceDeployment). The rule every tool shares
-- (docs/gitops.md): not yet observed -> Progressing; Stalled=True (needs a person) -> Degraded;
-- Ready=True -> Healthy; anything else, an unschedulable pod included -> Progressing.
local hs = {}
local generation = obj.metadata.generation
local status = obj.status
if status == nil or status.observedGeneration == nil or status.observedGeneration == 0 then
  hs.status = "Progressing"
  hs.message = "Waiting for the shardwise operator to observe this InferenceDeployment"
  return hs
end
-- A status written for an older spec says nothing about the current one.
if generation ~= nil and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "Generation " .. tostring(generation) .. " not yet observed (status is for " ..
    tostring(status.observedGeneration) .. ")"
  return hs
end
local conditions = {}
if status.conditions ~= nil then
  for _, condition in ipairs(status.conditions) do
    conditions[condition.type] = condition
  end
end
local function describe(condition, fallback)
  if condition == nil then
    return fallback
  end
  if condition.message ~= nil and condition.message ~= "" then
    return condition.reason .. ": " .. condition.message
  end
  return condition.reason or fallback
end
local stalled = conditions["Stalled"]
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(stalled, "Stalled")
  return hs
end
local ready = conditions["Ready"]
if ready ~= nil and ready.status == "True" and
    (ready.observedGeneration == nil or ready.observedGeneration == generation) then
  hs.status = "Healthy"
  hs.message = describe(ready, "Ready")
  return hs
end
local degraded = conditions["Degraded"]
hs.status = "Progressing"
if degraded ~= nil and degraded.status == "True" then
  hs.message = describe(degraded, "Degraded")
else
  hs.message = describe(conditions["Progressing"], describe(ready, "Not ready yet"))
end
return hs
