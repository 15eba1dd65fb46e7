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
