-- Argo CD health check for ordo Agents (ordo.dev/v1alpha1, kind Agent).
-- Install: resource.customizations.health.ordo.dev_Agent in argocd-cm (docs/pipeline.md).
-- The same check fits the other kinds with a Ready condition (ModelEndpoint, Tool, Memory,
-- AgentRole, ToolPermission, AgentPolicy): register it under their keys too.
--   Healthy      Ready=True for the current generation
--   Degraded     Ready=False: a referenced object, a Secret or a key is missing (the message
--                names which), or the spec is invalid
--   Progressing  the operator has not evaluated this generation yet, or Ready=Unknown
local hs = {}

local status = obj.status
local ready = nil
if status ~= nil and status.conditions ~= nil then
  for _, c in ipairs(status.conditions) do
    if c.type == "Ready" then
      ready = c
    end
  end
end

if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the ordo operator to evaluate readiness"
  return hs
end

local generation = obj.metadata.generation
local observed = ready.observedGeneration or status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the ordo operator to evaluate generation " .. tostring(generation)
  return hs
end

local text = ready.reason or ""
if ready.message ~= nil and ready.message ~= "" then
  text = text .. ": " .. ready.message
end
if ready.status == "True" then
  hs.status = "Healthy"
elseif ready.status == "False" then
  hs.status = "Degraded"
else
  hs.status = "Progressing"
end
hs.message = text
return hs
