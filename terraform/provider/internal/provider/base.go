package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
)

// base is what every resource shares: the API client the provider configured.
type base struct {
	client *Client
}

func (b *base) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if req.ProviderData == nil {
		return // before the provider is configured (validation)
	}
	client, ok := req.ProviderData.(*Client)
	if !ok {
		resp.Diagnostics.AddError("Unexpected provider data", fmt.Sprintf("got %T", req.ProviderData))
		return
	}
	b.client = client
}

type dataBase struct {
	client *Client
}

func (b *dataBase) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if req.ProviderData == nil {
		return
	}
	client, ok := req.ProviderData.(*Client)
	if !ok {
		resp.Diagnostics.AddError("Unexpected provider data", fmt.Sprintf("got %T", req.ProviderData))
		return
	}
	b.client = client
}

// attrNames is the set of a schema's top-level attributes: the API fields an error may
// name that Terraform can point at.
func attrNames(s schema.Schema) map[string]bool {
	names := make(map[string]bool, len(s.Attributes))
	for name := range s.Attributes {
		names[name] = true
	}
	return names
}

// attrGetter is a plan or a state, read attribute by attribute.
type attrGetter interface {
	GetAttribute(ctx context.Context, p path.Path, target interface{}) diag.Diagnostics
}

// attrSetter is a response's state with the response's diagnostics.
type attrSetter interface {
	SetAttribute(ctx context.Context, p path.Path, value interface{}) diag.Diagnostics
	diags() *diag.Diagnostics
}

type stateSetter struct {
	state *tfsdk.State
	d     *diag.Diagnostics
}

func (s stateSetter) SetAttribute(ctx context.Context, p path.Path, value interface{}) diag.Diagnostics {
	return s.state.SetAttribute(ctx, p, value)
}

func (s stateSetter) diags() *diag.Diagnostics { return s.d }

// diagsHolder carries a response's diagnostics into a helper.
type diagsHolder struct {
	d *diag.Diagnostics
}

// addCreateWait reports how a create's wait for the control plane ended (err nil: it
// finished). A wait that ran out of time or was interrupted is a warning, not an error:
// an error would taint the object, and the next apply would replace it (a topic's
// records lost); it stays in the state with the status it had, which makes the next
// plan update it, and the update waits again. Anything else (status failed, a refusal)
// is an error.
func addCreateWait(diags *diag.Diagnostics, what string, err error, attrs map[string]bool) {
	switch {
	case err == nil:
	case IsInterrupted(err):
		diags.AddWarning(what+" was created but is not ready yet",
			err.Error()+"\n\nIt stays in the state: the next apply waits for it again.")
	default:
		addAPIError(diags, what+" was created but did not become ready", err, attrs)
	}
}
