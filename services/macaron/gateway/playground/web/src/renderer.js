// The playground's A2UI renderer: the official Lit renderer (@a2ui/lit, protocol v0.9, basic
// catalog) behind one small function, so the page's own script stays plain JavaScript.
//
// renderA2ui(container, messages, onAction) checks the messages, feeds them to a fresh MessageProcessor
// (one per answer: surface ids such as "main" repeat across answers) and mounts one
// <a2ui-surface> per surface in `container`. Anything the renderer would not show throws an
// Error whose message says what is wrong, so the page can say it instead of breaking.
import { MessageProcessor } from '@a2ui/web_core/v0_9';
import { injectBasicCatalogStyles } from '@a2ui/web_core/v0_9/basic_catalog';
import { basicCatalog } from '@a2ui/lit/v0_9'; // also defines <a2ui-surface>

export const PROTOCOL_VERSION = 'v0.9';
export const CATALOG_ID = basicCatalog.id;
const MESSAGE_KINDS = ['createSurface', 'updateComponents', 'updateDataModel', 'deleteSurface'];

let stylesInjected = false;

/** Checks what the processor itself lets through: shape, version, one kind, known components. */
export function checkMessages(messages) {
  if (!Array.isArray(messages)) {
    throw new Error('expected a JSON array of A2UI messages, got ' + (messages === null ? 'null' : typeof messages));
  }
  if (messages.length === 0) throw new Error('the array holds no A2UI message');
  messages.forEach((message, i) => {
    if (message === null || typeof message !== 'object' || Array.isArray(message)) {
      throw new Error(`message ${i} is not an object`);
    }
    if (message.version !== PROTOCOL_VERSION) {
      throw new Error(`message ${i}: version is ${JSON.stringify(message.version)}, expected "${PROTOCOL_VERSION}"`);
    }
    const kinds = MESSAGE_KINDS.filter((k) => k in message);
    const unknown = Object.keys(message).filter((k) => k !== 'version' && !MESSAGE_KINDS.includes(k));
    if (kinds.length !== 1 || unknown.length) {
      throw new Error(`message ${i} must hold exactly one of ${MESSAGE_KINDS.join(', ')}` +
        (unknown.length ? ` (unknown: ${unknown.join(', ')})` : ''));
    }
    if (message.updateComponents) {
      const components = message.updateComponents.components;
      if (!Array.isArray(components)) throw new Error(`message ${i}: updateComponents.components is not an array`);
      for (const c of components) {
        if (c && c.component && !basicCatalog.components.has(c.component)) {
          throw new Error(`message ${i}: component "${c.id}" has type "${c.component}", which the basic catalog does not have`);
        }
      }
    }
  });
}

/** Renders A2UI messages into `container`; returns {surfaces, components}; throws a clear Error.
 * `onAction(action)` receives what the surface's buttons send (the protocol's client-to-server action). */
export function renderA2ui(container, messages, onAction) {
  checkMessages(messages);
  if (!stylesInjected) {
    injectBasicCatalogStyles();
    stylesInjected = true;
  }
  const processor = new MessageProcessor([basicCatalog], (action) => onAction?.(action));
  const surfaces = [];
  const subscription = processor.onSurfaceCreated((s) => surfaces.push(s));
  try {
    processor.processMessages(messages);
  } finally {
    subscription.unsubscribe?.();
  }
  if (surfaces.length === 0) throw new Error('no createSurface message: nothing to render');
  let components = 0;
  for (const surface of surfaces) {
    const ids = [...surface.componentsModel.entries].map(([id]) => id);
    if (!ids.includes('root')) {
      throw new Error(`surface "${surface.id}" has no component with id "root" (it has: ${ids.join(', ') || 'none'})`);
    }
    components += ids.length;
  }
  container.replaceChildren();
  for (const surface of surfaces) {
    const element = document.createElement('a2ui-surface');
    element.surface = surface;
    element.dataset.surfaceId = surface.id;
    container.append(element);
  }
  return { surfaces: surfaces.length, components };
}
