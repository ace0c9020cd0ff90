export { OpenAiFrontend, type OpenAiFrontendOptions } from './frontend.js';
export type { TokenTimings } from './context.js';
export { joinRestrictedApiArgs, parseOpenAiRestrictedApis } from './restrictions.js';
