package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func newTenantResource() resource.Resource { return &tenantResource{} }

type tenantResource struct{ base }

type tenantModel struct {
	ID          types.String `tfsdk:"id"`
	Slug        types.String `tfsdk:"slug"`
	Name        types.String `tfsdk:"name"`
	HomeRegion  types.String `tfsdk:"home_region"`
	Regions     types.Set    `tfsdk:"regions"`
	Status      types.String `tfsdk:"status"`
	IdentityRef types.String `tfsdk:"identity_ref"`
}

type tenantJSON struct {
	Slug         string   `json:"slug"`
	Name         string   `json:"name"`
	HomeRegion   *string  `json:"home_region"`
	Regions      []string `json:"regions"`
	Status       string   `json:"status"`
	StatusReason string   `json:"status_reason"`
	IdentityRef  string   `json:"identity_ref"`
}

func (r *tenantResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_tenant"
}

func (r *tenantResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A tenant (platform administrators only). Creating waits until its identity (the identity " +
			"provider's group and role groups) is provisioned; it starts with the default quota (`meridian_quota` " +
			"changes it). Deleting is refused while it has topics or service accounts, and waits until it is gone. " +
			"Changing `slug` replaces the tenant.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "The slug."},
			"slug": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "3-32 lowercase letters, digits and single hyphens; prefixes every topic name."},
			"name": schema.StringAttribute{Required: true,
				Description: "The display name."},
			"home_region": schema.StringAttribute{Optional: true,
				Description: "The region its topics go to by default (null: none)."},
			"regions": schema.SetAttribute{Optional: true, Computed: true, ElementType: types.StringType, PlanModifiers: keepSet,
				Description: "The regions it may use besides its home region (mirror links)."},
			"status": schema.StringAttribute{Computed: true,
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), settling("pending", "provisioning")},
				Description: "`pending`, `provisioning`, `ready`, `failed` or `deleting`. A tenant not ready (its create's wait " +
					"ran out or was interrupted) is updated by the next apply, which waits for it."},
			"identity_ref": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "The identity provider's reference to its group."},
		},
	}
}

func (r *tenantResource) attrs() map[string]bool {
	var resp resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &resp)
	return attrNames(resp.Schema)
}

func tenantState(t tenantJSON) tenantModel {
	return tenantModel{
		ID:          types.StringValue(t.Slug),
		Slug:        types.StringValue(t.Slug),
		Name:        types.StringValue(t.Name),
		HomeRegion:  stringOrNull(t.HomeRegion),
		Regions:     setOf(t.Regions),
		Status:      types.StringValue(t.Status),
		IdentityRef: types.StringValue(t.IdentityRef),
	}
}

func (r *tenantResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan tenantModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := body{}
	b.str("slug", plan.Slug)
	b.str("name", plan.Name)
	b.str("home_region", plan.HomeRegion)
	b.strings(ctx, "regions", plan.Regions, &resp.Diagnostics)
	var created tenantJSON
	if err := r.client.Post(ctx, "tenants", b, &created); err != nil {
		addAPIError(&resp.Diagnostics, "Could not create the tenant", err, r.attrs())
		return
	}
	tenant, err := r.waitReady(ctx, created.Slug)
	if tenant == nil {
		tenant = &created
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, tenantState(*tenant))...)
	addCreateWait(&resp.Diagnostics, "The tenant", err, r.attrs())
}

func (r *tenantResource) waitReady(ctx context.Context, slug string) (*tenantJSON, error) {
	var tenant tenantJSON
	err := r.client.waitFor(ctx, "waiting for tenant "+slug, func() (bool, string, error) {
		if err := r.client.Get(ctx, "tenants/"+escape(slug), nil, &tenant); err != nil {
			return false, "", err
		}
		if tenant.Status == "failed" {
			return false, tenant.Status, &APIError{Status: 409, Code: "failed", Message: tenant.StatusReason}
		}
		return tenant.Status == "ready", tenant.Status, nil
	})
	if tenant.Slug == "" {
		return nil, err
	}
	return &tenant, err
}

func (r *tenantResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state tenantModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var tenant tenantJSON
	err := r.client.Get(ctx, "tenants/"+escape(state.ID.ValueString()), nil, &tenant)
	gone, err := r.client.Gone(ctx, err, state.ID.ValueString())
	if gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not read the tenant", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, tenantState(tenant))...)
}

func (r *tenantResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state tenantModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := changes{body{}}
	c.str("name", plan.Name, state.Name)
	if !plan.HomeRegion.Equal(state.HomeRegion) {
		if plan.HomeRegion.IsNull() {
			c.body["home_region"] = nil
		} else {
			c.body["home_region"] = plan.HomeRegion.ValueString()
		}
	}
	c.strings(ctx, "regions", plan.Regions, state.Regions, &resp.Diagnostics)
	var tenant tenantJSON
	if err := r.client.Patch(ctx, "tenants/"+escape(state.ID.ValueString()), nil, c.body, &tenant); err != nil {
		addAPIError(&resp.Diagnostics, "Could not change the tenant", err, r.attrs())
		return
	}
	if tenant.Status != "ready" { // its identity not provisioned yet (an interrupted create)
		ready, err := r.waitReady(ctx, tenant.Slug)
		if ready != nil {
			tenant = *ready
		}
		if err != nil {
			addAPIError(&resp.Diagnostics, "The tenant's identity was not provisioned", err, r.attrs())
		}
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, tenantState(tenant))...)
}

func (r *tenantResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state tenantModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	path := "tenants/" + escape(state.ID.ValueString())
	if _, err := r.client.Gone(ctx, r.client.Delete(ctx, path, nil), state.ID.ValueString()); err != nil {
		addAPIError(&resp.Diagnostics, "Could not delete the tenant", err, r.attrs())
		return
	}
	if err := waitGone(ctx, r.client, path, nil); err != nil {
		resp.Diagnostics.AddError("The tenant was not deleted", err.Error())
	}
}

// ImportState takes the slug.
func (r *tenantResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}
