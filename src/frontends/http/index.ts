export { HttpFrontend, DEFAULT_MAX_INPUT_SIZE, type HttpFrontendOptions } from './server.js';
export { LogSettings, TraceSettings, type LogSettingsState } from './settings.js';
export { parseRestrictedApis, type HttpApiCategory } from './restrictions.js';
